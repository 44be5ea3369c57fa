"""nnhal's native host kernels: float32 loops in C (kernels.c), called through ctypes.

CMake builds ``kernels.c`` at install time into the extension module ``nnhal.hostkernels.native._native``
when a C compiler and Python's headers are there (NNHAL_NATIVE_KERNELS, on by default). The host kernels
ask :func:`available` and keep to numpy when it is False, so every result has a numpy path too; the tests
run both and compare them. ``NNHAL_NATIVE=0`` in the environment switches the native kernels off at load
(A/B measurements, or ruling them out when a result looks wrong); :func:`status` says which applies.

What is native (the loops numpy cannot run in one pass over memory):

* :func:`dwconv_nhwc`: depthwise 2-D convolution, channels last, with bias and activation fused;
* :func:`fake_quantize_blocks`: per-block dynamic int8/uint8 quantization of activations, dequantized;
* :func:`activation`: Relu, Clip, HardSigmoid, HardSwish, Sigmoid, SiLU and the exact Gelu (erf by the
  numpy fast Erf's rational approximation) in one pass;
* :func:`pool_nhwc`: 2-D MaxPool and AveragePool, channels last, every window's taps while its channels
  are in L1 (one pass over the input; the output may be a channel slice of a wider tensor);
  :func:`global_pool_nhwc`: GlobalAveragePool and GlobalMaxPool;
* :func:`gather_last`: Gather along the last axis of 4-byte elements, a row at a time; :func:`shuffle_last`
  the channel shuffle's permutation among them (ShuffleNet's in NHWC) by interleaving stores, no gathers;
* :func:`add_act`: a + b with a fused activation in one pass (a residual Add or Sum followed by its Relu).

Each runs on the calling thread (kernels.c says why not OpenMP); the native thread pool (``nn_pool_run``)
splits the large ones over the cpu device's threads without the GIL: :func:`gemm` (a GEMM with its bias
and activation, through the cblas_sgemm of the BLAS numpy uses, found by :func:`pool_available`),
:func:`batched_gemm`, :func:`conv_im2col`, :func:`dwconv_parallel`, :func:`activation_parallel`
(hostkernels/parallel.py decides the parts). The pooling kernels take a range of their outermost work
(output rows of N * OH, images) so that a caller may split one op over threads.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from dataclasses import dataclass

import numpy as np

ABI_VERSION = 11

# Activation kinds, as numbered in kernels.c
ACTIVATIONS = {"relu": 1, "clip": 2, "hardsigmoid": 3, "hardswish": 4, "sigmoid": 5, "silu": 6, "gelu": 7}
# Pooling kinds, as numbered in kernels.c: max, average over the taps inside the input, average over the
# taps inside the padded input (count_include_pad)
POOLS = {"max": 0, "avg": 1, "avg_pad": 2}


class Act(ctypes.Structure):
    """nn_act: an activation kind and its parameters (Clip bounds, HardSigmoid alpha and beta)."""

    _fields_ = [("kind", ctypes.c_int32), ("lo", ctypes.c_float), ("hi", ctypes.c_float),
                ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]


class DwParams(ctypes.Structure):
    """nn_dw_params: the geometry of a depthwise convolution, its thread count and activation."""

    _fields_ = [(name, ctypes.c_int64) for name in
                ("n", "h", "w", "c", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pad_top", "pad_left")] \
        + [("act", Act)]


class GemmArgs(ctypes.Structure):
    """nn_gemm_args: C (m, n) = A (m, k) @ B (+ bias per column, activation), split by rows or columns."""

    _fields_ = [("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p), ("bias", ctypes.c_void_p)] \
        + [(name, ctypes.c_int64) for name in ("m", "n", "k", "lda", "ldb", "ldc", "row_align")] \
        + [("trans_b", ctypes.c_int32), ("by_cols", ctypes.c_int32), ("act", Act)]


class BatchedGemmArgs(ctypes.Structure):
    """nn_bgemm_args: a stack of GEMMs (no epilogue), element strides between the stack's matrices."""

    _fields_ = [("g", GemmArgs)] + [(name, ctypes.c_int64) for name in ("batch", "sa", "sb", "sc")]


class DwArgs(ctypes.Structure):
    """nn_dw_args: a depthwise convolution split by output rows."""

    _fields_ = [("x", ctypes.c_void_p), ("wt", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("p", ctypes.POINTER(DwParams))]


class ActArgs(ctypes.Structure):
    """nn_act_args: an activation split by ranges."""

    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("len", ctypes.c_int64), ("act", ctypes.POINTER(Act))]


class ConvArgs(ctypes.Structure):
    """nn_conv_args: a group-1 channels-last convolution by im2col bands, split by output rows."""

    _fields_ = [("x", ctypes.c_void_p), ("w", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("scratch", ctypes.c_void_p)] \
        + [(name, ctypes.c_int64) for name in ("n", "h", "w_in", "c", "oh", "ow", "m", "kh", "kw", "sh", "sw", "dh",
                                               "dw", "pad_top", "pad_left", "ld", "band_rows")] + [("act", Act)]
class PoolParams(ctypes.Structure):
    """nn_pool_params: a 2-D pooling's geometry (input (n, h, w, c), output (n, oh, ow, c) with ``y_stride``
    floats between output pixels) and its kind (POOLS)."""

    _fields_ = [(name, ctypes.c_int64) for name in
                ("n", "h", "w", "c", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pad_top", "pad_left",
                 "pad_bottom", "pad_right", "y_stride")] + [("kind", ctypes.c_int32)]


@dataclass(frozen=True)
class Status:
    """Whether the native kernels are in use, and why not when they are not."""

    available: bool
    reason: str
    path: str | None = None


def _load() -> tuple[ctypes.CDLL | None, Status]:
    if os.environ.get("NNHAL_NATIVE", "1") == "0":
        return None, Status(False, "switched off by NNHAL_NATIVE=0")
    try:
        spec = importlib.util.find_spec(f"{__name__}._native")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return None, Status(False, "not built (no C compiler or Python headers at install, or "
                                   "NNHAL_NATIVE_KERNELS=OFF): numpy runs every kernel")
    try:
        lib = ctypes.CDLL(spec.origin)
        version = lib.nn_abi_version()
    except (OSError, AttributeError) as exc:
        return None, Status(False, f"cannot load {spec.origin}: {exc}", spec.origin)
    if version != ABI_VERSION:
        return None, Status(False, f"{spec.origin} has ABI {version}, this nnhal needs {ABI_VERSION}: "
                                   "reinstall nnhal", spec.origin)
    f32 = ctypes.c_void_p
    lib.nn_activation_f32.argtypes = [f32, f32, ctypes.c_int64, ctypes.POINTER(Act)]
    lib.nn_activation_f32.restype = None
    lib.nn_dwconv_nhwc_f32.argtypes = [f32, f32, f32, f32, ctypes.POINTER(DwParams), ctypes.c_int64,
                                       ctypes.c_int64]
    lib.nn_dwconv_nhwc_f32.restype = None
    lib.nn_fake_quantize_blocks_f32.argtypes = [f32, f32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                                ctypes.c_int32]
    lib.nn_fake_quantize_blocks_f32.restype = None
    lib.nn_spin_wait.argtypes = [f32, ctypes.c_int64, ctypes.c_int64]
    lib.nn_spin_wait.restype = ctypes.c_int64
    lib.nn_pool_set_threads.argtypes = [ctypes.c_int64]
    lib.nn_pool_set_threads.restype = ctypes.c_int64
    lib.nn_pool_set_spin.argtypes = [ctypes.c_int64]
    lib.nn_pool_set_spin.restype = None
    lib.nn_set_sgemm.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.nn_set_sgemm.restype = None
    lib.nn_gconv_parallel_f32.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.nn_gconv_parallel_f32.restype = None
    lib.nn_layernorm_parallel_f32.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.nn_layernorm_parallel_f32.restype = None
    lib.nn_pool_parallel_f32.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.nn_pool_parallel_f32.restype = None
    for name, args in (("nn_gemm_f32", GemmArgs), ("nn_bgemm_f32", BatchedGemmArgs), ("nn_dwconv_parallel_f32", DwArgs),
                       ("nn_activation_parallel_f32", ActArgs), ("nn_conv_im2col_f32", ConvArgs)):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.POINTER(args), ctypes.c_int64]
        fn.restype = None
    i64 = ctypes.c_int64
    lib.nn_pool_nhwc_f32.argtypes = [f32, f32, ctypes.POINTER(PoolParams), i64, i64]
    lib.nn_pool_nhwc_f32.restype = None
    lib.nn_global_pool_nhwc_f32.argtypes = [f32, f32, i64, i64, ctypes.c_int32, i64, i64]
    lib.nn_global_pool_nhwc_f32.restype = None
    lib.nn_gather_last_b32.argtypes = [f32, f32, f32, i64, i64, i64, i64]
    lib.nn_gather_last_b32.restype = None
    lib.nn_shuffle_last_b32.argtypes = [f32, f32, i64, i64, i64, i64]
    lib.nn_shuffle_last_b32.restype = None
    lib.nn_add_act_f32.argtypes = [f32, f32, f32, i64, i64, ctypes.POINTER(Act)]
    lib.nn_add_act_f32.restype = None
    return lib, Status(True, "loaded", spec.origin)


_lib, _status = _load()


def available() -> bool:
    """True when the native kernels are built, loaded and not switched off."""
    return _lib is not None


def status() -> Status:
    return _status


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@functools.lru_cache(maxsize=256)
def make_act(kind: str | None, lo: float | None = None, hi: float | None = None,
             alpha: float = 0.2, beta: float = 0.5) -> Act:
    """The nn_act record of an activation kind (None: no activation); one shared record per set of
    arguments (the kernels only read it)."""
    return Act(ACTIVATIONS[kind] if kind else 0, -np.inf if lo is None else float(lo),
               np.inf if hi is None else float(hi), float(alpha), float(beta))


def activation(x: np.ndarray, y: np.ndarray, act: Act) -> None:
    """y = act(x) for C-contiguous float32 ``x`` and ``y`` of one size (``y`` may be ``x``)."""
    _lib.nn_activation_f32(_ptr(x), _ptr(y), x.size, ctypes.byref(act))


def dwconv_nhwc(x: np.ndarray, y: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                params: DwParams, rows: tuple[int, int] | None = None) -> None:
    """Depthwise convolution of C-contiguous float32 NHWC ``x`` into ``y`` (N, OH, OW, C); ``weights``
    (KH, KW, C) and ``bias`` (C,) C-contiguous float32. ``params`` holds the geometry and is read only.
    ``rows``: only output rows [r0, r1) of the flattened N * OH rows (default all)."""
    r0, r1 = rows if rows is not None else (0, params.n * params.oh)
    _lib.nn_dwconv_nhwc_f32(_ptr(x), _ptr(y), _ptr(weights), None if bias is None else _ptr(bias),
                            ctypes.byref(params), r0, r1)


def fake_quantize_blocks(x: np.ndarray, y: np.ndarray, block: int, signed: bool) -> None:
    """y = x quantized per row and block of ``block`` columns (int8: peak / 127; uint8: range / 255 with a
    zero point) and dequantized, for C-contiguous float32 (m, k) ``x`` and ``y``, k a multiple of block."""
    m, k = x.shape
    _lib.nn_fake_quantize_blocks_f32(_ptr(x), _ptr(y), m, k, block, int(signed))


def spin_wait(flag: np.ndarray, value: int, max_ns: int) -> int:
    """Wait (spinning, the GIL released) until ``flag[0]`` (an int64 array) differs from ``value`` or
    ``max_ns`` passed; the flag's value. Only when :func:`available`."""
    return _lib.nn_spin_wait(_ptr(flag), value, max_ns)


# ------------------------------------------------------------------ the native thread pool
_blas: tuple[bool, str] | None = None    # (found, the sgemm symbol or why not)

# cblas_sgemm as the BLAS libraries numpy is built with export it: (symbol, 64-bit integers)
SGEMM_SYMBOLS = (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True), ("scipy_cblas_sgemm", False),
                 ("cblas_sgemm", False))


def _find_sgemm() -> tuple[bool, str]:
    """Hand kernels.c the cblas_sgemm of the BLAS numpy uses (threadpoolctl names its file)."""
    import numpy  # noqa: F401 - loads numpy's BLAS first
    from threadpoolctl import threadpool_info

    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    # numpy's own BLAS first (another library, e.g. torch's, may be loaded too)
    libs.sort(key=lambda i: "numpy" not in i.get("filepath", ""))
    for info in libs:
        try:
            blas = ctypes.CDLL(info["filepath"])
        except OSError:
            continue
        for symbol, ilp64 in SGEMM_SYMBOLS:
            fn = getattr(blas, symbol, None)
            if fn is not None:
                _lib.nn_set_sgemm(ctypes.cast(fn, ctypes.c_void_p), int(ilp64))
                return True, f"{symbol} in {os.path.basename(info['filepath'])}"
    return False, "no cblas_sgemm found in the BLAS numpy uses"


def pool_available() -> bool:
    """Whether the native pool can run split GEMMs (the native kernels are loaded and numpy's BLAS has a
    cblas_sgemm to call)."""
    global _blas
    if _lib is None:
        return False
    if _blas is None:
        _blas = _find_sgemm()
    return _blas[0]


def pool_set_threads(n: int) -> int:
    """Make the native pool run parts on ``n`` threads (the caller and n - 1 workers); the threads it has."""
    return _lib.nn_pool_set_threads(n)


def _or_null(a: np.ndarray | None) -> int | None:
    return None if a is None else _ptr(a)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, bias: np.ndarray | None, act: Act, parts: int,
         row_align: int = 1, by_cols: bool = False) -> None:
    """c = act(a @ b + bias) for float32 2-D a (m, k) and c (m, n) with unit column stride, b (k, n) C- or
    Fortran-ordered, bias (n,) or None; split into ``parts`` by rows (multiples of row_align) or columns."""
    trans_b = not b.flags.c_contiguous
    ldb = b.strides[1] // 4 if trans_b else b.strides[0] // 4
    args = GemmArgs(_ptr(a), _ptr(b), _ptr(c), _or_null(bias), a.shape[0], b.shape[1], a.shape[1],
                    a.strides[0] // 4, ldb, c.strides[0] // 4, row_align, int(trans_b), int(by_cols), act)
    _lib.nn_gemm_f32(ctypes.byref(args), parts)


def dwconv_parallel(x: np.ndarray, y: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                    params: DwParams, parts: int) -> None:
    """dwconv_nhwc split by output rows over ``parts`` threads of the native pool."""
    args = DwArgs(_ptr(x), _ptr(weights), _or_null(bias), _ptr(y), ctypes.pointer(params))
    _lib.nn_dwconv_parallel_f32(ctypes.byref(args), parts)


def activation_parallel(x: np.ndarray, y: np.ndarray, act: Act, parts: int) -> None:
    """activation split into ``parts`` ranges over the native pool."""
    args = ActArgs(_ptr(x), _ptr(y), x.size, ctypes.pointer(act))
    _lib.nn_activation_parallel_f32(ctypes.byref(args), parts)


def conv_im2col(args: ConvArgs, parts: int) -> None:
    """A group-1 NHWC convolution by im2col bands (ConvArgs filled by the caller), split by output rows."""
    _lib.nn_conv_im2col_f32(ctypes.byref(args), parts)


def batched_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, parts: int) -> None:
    """c[i] = a[i] @ b[i] for 3-D float32 a (batch, m, k), b (batch or 1, k, n) and c (batch, m, n), each
    matrix with unit column stride (b's may be transposed), split over rows of the whole stack."""
    bm = b[0]
    trans_b = not (bm.strides[1] == 4)
    ldb = bm.strides[1] // 4 if trans_b else bm.strides[0] // 4
    g = GemmArgs(_ptr(a), _ptr(b), _ptr(c), None, a.shape[1], b.shape[2], a.shape[2], a.strides[1] // 4, ldb,
                 c.strides[1] // 4, 1, int(trans_b), 0, make_act(None))
    args = BatchedGemmArgs(g, a.shape[0], a.strides[0] // 4, 0 if b.shape[0] == 1 else b.strides[0] // 4,
                           c.strides[0] // 4)
    _lib.nn_bgemm_f32(ctypes.byref(args), parts)
def pool_nhwc(x: np.ndarray, y: np.ndarray, params: PoolParams, r0: int, r1: int) -> None:
    """Output rows [r0, r1) of the flattened N * OH rows of a 2-D pooling of C-contiguous float32 NHWC
    ``x`` into float32 ``y`` (N, OH, OW, C), whose pixels lie ``params.y_stride`` floats apart and whose
    channels are contiguous (a channel slice of a wider tensor is fine). ``params`` is read only."""
    _lib.nn_pool_nhwc_f32(_ptr(x), _ptr(y), ctypes.byref(params), r0, r1)


class PoolArgs(ctypes.Structure):
    """nn_pool_args: a 2-D pooling (params) or a global pooling (params NULL) split over the native pool."""

    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("p", ctypes.c_void_p)] \
        + [(name, ctypes.c_int64) for name in ("total", "hw", "c")] + [("kind", ctypes.c_int32)]


def pool_parallel(x: np.ndarray, y: np.ndarray, params, kind: str, parts: int) -> None:
    """pool_nhwc (``params`` given: all N * OH output rows) or global_pool_nhwc (``params`` None: all
    images) split into ``parts`` over the native pool."""
    n, h, w, c = x.shape
    if params is not None:
        args = PoolArgs(_ptr(x), _ptr(y), ctypes.addressof(params), params.n * params.oh, 0, 0, 0)
    else:
        args = PoolArgs(_ptr(x), _ptr(y), None, n, h * w, c, POOLS[kind])
    _lib.nn_pool_parallel_f32(ctypes.byref(args), parts)


def global_pool_nhwc(x: np.ndarray, y: np.ndarray, kind: str, r0: int, r1: int) -> None:
    """Images [r0, r1) of the global pooling (POOLS ``kind``: "max" or "avg") of C-contiguous float32
    ``x`` (N, H, W, C) into C-contiguous float32 ``y`` (N, 1, 1, C): channels reduced over the pixels in
    order, the mean as the sum divided by H * W (np.mean's steps)."""
    n, h, w, c = x.shape
    _lib.nn_global_pool_nhwc_f32(_ptr(x), _ptr(y), h * w, c, POOLS[kind], r0, r1)


def gather_last(x: np.ndarray, y: np.ndarray, idx: np.ndarray, r0: int, r1: int) -> None:
    """Rows [r0, r1) of y[..., k] = x[..., idx[k]] for C-contiguous ``x`` and ``y`` of one 4-byte dtype
    (rows: the product of the leading axes) and C-contiguous int32 ``idx``, every index in [0, x.shape[-1])."""
    _lib.nn_gather_last_b32(_ptr(x), _ptr(y), _ptr(idx), idx.size, x.shape[-1], r0, r1)


def shuffle_last(x: np.ndarray, y: np.ndarray, groups: int, r0: int, r1: int) -> None:
    """Rows [r0, r1) of the channel shuffle y[..., k * groups + g] = x[..., g * (C / groups) + k] for
    C-contiguous ``x`` and ``y`` of one 4-byte dtype and shape, C = x.shape[-1] a multiple of ``groups``."""
    _lib.nn_shuffle_last_b32(_ptr(x), _ptr(y), groups, x.shape[-1] // groups, r0, r1)


def add_act(a: np.ndarray, b: np.ndarray, y: np.ndarray, act: Act, i0: int, i1: int) -> None:
    """y.flat[i] = act(a.flat[i] + b.flat[i]) for i in [i0, i1): C-contiguous float32 arrays of one size, ``y``
    may be ``a`` or ``b``. Relu and Clip let a NaN through, as numpy's maximum and minimum do."""
    _lib.nn_add_act_f32(_ptr(a), _ptr(b), _ptr(y), i0, i1, ctypes.byref(act))


class LayerNormArgs(ctypes.Structure):
    """nn_layernorm_args: LayerNormalization over the last axis of (rows, width), split by rows."""

    _fields_ = [("x", ctypes.c_void_p), ("scale", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("rows", ctypes.c_int64), ("width", ctypes.c_int64), ("eps", ctypes.c_float)]


def layernorm(x: np.ndarray, y: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, eps: float,
              parts: int) -> None:
    """y = LayerNormalization(x) over the last axis for C-contiguous float32 ``x`` and ``y`` (may be x),
    ``scale``/``bias`` C-contiguous float32 of the last axis' width or None; ``parts`` over the native pool."""
    width = x.shape[-1]
    args = LayerNormArgs(_ptr(x), _or_null(scale), _or_null(bias), _ptr(y), x.size // max(1, width), width, eps)
    _lib.nn_layernorm_parallel_f32(ctypes.byref(args), parts)


class GconvParams(ctypes.Structure):
    """nn_gconv_params: a grouped convolution's geometry (input (n, h, w, c), output (n, oh, ow, m), groups
    of cg input and mg output channels, mg a multiple of 8) and its activation."""

    _fields_ = [(name, ctypes.c_int64) for name in
                ("n", "h", "w", "c", "oh", "ow", "m", "kh", "kw", "sh", "sw", "dh", "dw", "pad_top", "pad_left",
                 "groups", "cg", "mg")] + [("act", Act)]


class GconvArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("wt", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("p", ctypes.c_void_p)]


def gconv_nhwc(x: np.ndarray, y: np.ndarray, weights: np.ndarray, bias: np.ndarray | None, params: GconvParams,
               parts: int) -> None:
    """Grouped convolution of C-contiguous float32 NHWC ``x`` into ``y`` (N, OH, OW, M); ``weights``
    (G, KH, KW, CG, MG) and ``bias`` (M,) C-contiguous float32; split by output rows over ``parts``."""
    args = GconvArgs(_ptr(x), _ptr(weights), _or_null(bias), _ptr(y), ctypes.addressof(params))
    _lib.nn_gconv_parallel_f32(ctypes.byref(args), parts)
