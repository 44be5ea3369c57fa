"""LSTM, GRU and DynamicQuantizeLSTM (com.microsoft) on the cpu device, fast: packed weights and in-place
gates (_recurrent.py) for the common case, beside the host references (hostkernels/op_lstm.py, op_gru.py,
ms_dynamic_quantize_lstm.py).

LSTM, GRU and RNN on the cpu device as native recurrences (kernels.c ``Recurrent``): the weights are packed
once at prepare (W of every direction for one projection GEMM, R^T per direction, the biases folded where the
cell allows, peepholes), and one call runs the layer: X W^T + bias for every step and direction as one GEMM,
then each direction's time steps in C (the recurrent product and the gate math fused: clip, any ONNX activation
with its alpha and beta, peepholes, input_forget, linear_before_reset, sequence_lens, initial states, both
layouts, any batch). The two directions of a bidirectional layer run as two parts on the native pool.

Taken whenever the native kernels are loaded (the activations named in ONNX, float32 or float16 operands:
float16 is widened on the way in and the outputs narrowed on the way out). Constant W, R, B and P (the usual
case) are packed once at prepare; weights fed as graph inputs are packed at each run. Without the native kernels the
numpy kernels run the node (hostkernels/op_lstm.py, op_gru.py, op_rnn.py: the "fast" recurrence of
_recurrent.py for the common case, else the reference).
"""
from __future__ import annotations

import os

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels import _recurrent
from nnhal.graph.node import Node
from nnhal.hostkernels._qrc import _NEEDS
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.ms_dynamic_quantize_lstm import float_infos

_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)


class FastLSTMKernel(Kernel):
    """Packed weights, one GEMM for the input projection of every step and direction, in-place gates
    (_recurrent.py); the common case only (``_recurrent.fits``)."""

    op_type = "LSTM"
    name = "fast"

    def score(self, node, ins, outs) -> int:
        return 2 if _recurrent.fits(node, ins, ("Sigmoid", "Tanh", "Tanh"), (5, 6)) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        packed = _recurrent.pack(ins, 4, 4, 3)
        layout = node.attrs.get("layout", 0)
        reverse = tuple(d == 1 or node.attrs["direction"] == "reverse" for d in range(packed.directions))
        dtype = np.dtype(ins[0].dtype)

        def run(inputs, outputs):
            x = inputs[0]
            batch = x.shape[1 - layout]
            shape = (packed.directions, batch, packed.hidden)
            h = _recurrent.initial(inputs, 5, shape, layout)
            c = _recurrent.initial(inputs, 6, shape, layout)
            y, states = _recurrent.lstm(x, packed, h, c, reverse, layout)
            return _recurrent.finish(y, states, outputs, dtype, layout)

        return run


class FastGRUKernel(Kernel):
    """Packed weights, one GEMM for the input projection of every step and direction, in-place gates
    (_recurrent.py); the common case only (``_recurrent.fits``)."""

    op_type = "GRU"
    name = "fast"

    def score(self, node, ins, outs) -> int:
        return 2 if _recurrent.fits(node, ins, ("Sigmoid", "Tanh"), (5,)) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        packed = _recurrent.pack(ins, 3, 2, 2)
        layout = node.attrs.get("layout", 0)
        linear = bool(node.attrs.get("linear_before_reset", 0))
        reverse = tuple(d == 1 or node.attrs["direction"] == "reverse" for d in range(packed.directions))
        dtype = np.dtype(ins[0].dtype)

        def run(inputs, outputs):
            x = inputs[0]
            h = _recurrent.initial(inputs, 5, (packed.directions, x.shape[1 - layout], packed.hidden), layout)
            y, states = _recurrent.gru(x, packed, h, reverse, linear, layout)
            return _recurrent.finish(y, states, outputs, dtype, layout)

        return run


class FastDynamicQuantizeLSTMKernel(Kernel):
    """Constant weights: dequantized once at prepare, then the fast LSTM recurrence where it fits."""

    op_type = "DynamicQuantizeLSTM"
    name = "fast"

    def score(self, node, ins, outs) -> int:
        floats = float_infos(ins)
        return 2 if floats is not None and FastLSTMKernel().score(node, floats, outs) > 0 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        run_fast = FastLSTMKernel().prepare(node, float_infos(ins), outs)
        return lambda inputs, outputs: run_fast(inputs[:8], outputs)


# the recurrent product of a step runs as a GEMV, bound by reading R from L2: count it as this many GEMM MACs
GEMV_COST = 4


def _activations(node: Node, defaults: tuple[str, ...], directions: int) -> tuple | None:
    """Per direction and function, (kind, alpha, beta) as kernels.c numbers them, alpha and beta consumed in
    order by the functions that take them (as the ONNX reference does); None when the list does not fit."""
    names = [a.lower() for a in (node.attrs.get("activations") or [])]
    per = len(defaults)
    if not names:
        names = [d.lower() for d in defaults] * directions
    elif len(names) == per and directions == 2:
        names = names * 2
    if len(names) != per * directions or any(n not in native.RECURRENT_ACTIVATIONS or n not in _NEEDS for n in names):
        return None
    alphas = list(node.attrs.get("activation_alpha") or [])
    betas = list(node.attrs.get("activation_beta") or [])
    acts = []
    for name in names:
        default_alpha, default_beta = _NEEDS[name]
        alpha = (alphas.pop(0) if alphas else default_alpha) if default_alpha is not None else 0.0
        beta = (betas.pop(0) if betas else default_beta) if default_beta is not None else 0.0
        acts.append((native.RECURRENT_ACTIVATIONS[name], float(alpha), float(beta)))
    return tuple(acts)


def _operand(inputs: list, i: int, dtype) -> np.ndarray | None:
    """Input ``i`` as a C-contiguous array of ``dtype`` (None when absent; as it is when it already is one)."""
    v = inputs[i] if len(inputs) > i else None
    if v is None or (type(v) is np.ndarray and v.dtype == dtype and v.flags.c_contiguous):
        return v
    return np.ascontiguousarray(v, dtype=dtype)


def _store(result: np.ndarray | None, outputs: list, k: int, dtype: np.dtype) -> np.ndarray | None:
    """``result`` in the planned output ``k`` (converted), or as an array of ``dtype`` when none was planned."""
    out = outputs[k] if k < len(outputs) else None
    if result is None or out is result:
        return result
    if out is not None:
        np.copyto(out, result, casting="unsafe")
        return out
    return result if result.dtype == dtype else result.astype(dtype)


# NNHAL_RNN_PROJECT: how a native layer projects several rows of X (kernels.c Recurrent's project argument)
_PROJECTIONS = {"auto": 0, "blas": 1, "blocked": 2}


def _projection() -> int:
    """The projection mode NNHAL_RNN_PROJECT names (read at prepare): ``auto`` (the default: the layer's own
    blocked kernels for a small enough product, else the BLAS), ``blas`` (always the BLAS: numpy's when the pool is
    off), ``blocked`` (always the blocked kernels when the layer packed W^T); for A/B runs and tests. Any other
    value reads as ``auto``, as NNHAL_CPU_POOL's unknown values do."""
    return _PROJECTIONS.get(os.environ.get("NNHAL_RNN_PROJECT", "auto"), 0)


class _NativeRecurrent(Kernel):
    """The shared part of the three cells: acceptance, packing and the run."""

    name = "native"
    cell: str
    gates: int
    defaults: tuple[str, ...]
    states: tuple[int, ...]         # input indices of the initial states (h0, c0)
    peephole: int | None = None     # input index of P (LSTM)

    def score(self, node, ins, outs) -> int:
        if not native.available() or ins[0] is None or ins[0].dtype not in (np.float32, np.float16):
            return 0
        if any(len(ins) <= i or ins[i] is None for i in (1, 2)):
            return 0
        floats = (1, 2, 3) + self.states + ((self.peephole,) if self.peephole is not None else ())
        if any(len(ins) > i and ins[i] is not None and ins[i].dtype not in (np.float32, np.float16) for i in floats):
            return 0
        shape = ins[1].shape
        if shape is None or len(shape) != 3 or shape[0] not in (1, 2):
            return 0
        return 3 if _activations(node, self.defaults, shape[0]) is not None else 0

    def pack(self, node: Node, values: list[np.ndarray | None]):
        """The native layer of this node for these W, R, B (and P) values (see kernels.c Recurrent), and the
        projection's W^T and bias for the numpy GEMM (see run)."""
        w = np.asarray(values[1], np.float32)
        r = np.asarray(values[2], np.float32)
        d, rows, inputs = w.shape
        h = rows // self.gates
        b = np.zeros((d, 2 * rows), np.float32)
        if len(values) > 3 and values[3] is not None:
            b = np.asarray(values[3], np.float32).reshape(d, 2 * rows)
        linear = int(bool(node.attrs.get("linear_before_reset", 0))) if self.cell == "gru" else 0
        bias = b[:, :rows] + b[:, rows:]
        rbh = None
        if linear:
            # r * (h R_h^T + Rb_h): Rb_h stays inside the product's bracket, per step
            bias[:, 2 * h:] = b[:, 2 * h:rows]
            rbh = np.ascontiguousarray(b[:, rows + 2 * h:])
        peep = None
        if self.peephole is not None and len(values) > self.peephole and values[self.peephole] is not None:
            peep = np.ascontiguousarray(np.asarray(values[self.peephole], np.float32).reshape(d, 3 * h))
        geometry = (d, int(node.attrs.get("direction", "forward") == "reverse"), inputs, h,
                    int(node.attrs.get("layout", 0)), linear,
                    int(bool(node.attrs.get("input_forget", 0))) if self.cell == "lstm" else 0)
        clip = node.attrs.get("clip")
        w2, bias = np.ascontiguousarray(w.reshape(rows * d, inputs)), np.ascontiguousarray(bias.reshape(-1))
        layer = native.Recurrent(self.cell, geometry, w2, bias, np.ascontiguousarray(r.transpose(0, 2, 1)), rbh, peep,
                                 _activations(node, self.defaults, d), None if clip is None else float(clip),
                                 _projection())
        return layer, w2.T, bias

    def prepare(self, node, ins, outs) -> RunFn:
        operands = (1, 2, 3) + ((self.peephole,) if self.peephole is not None else ())
        constant = all(len(ins) <= i or ins[i] is None or ins[i].value is not None for i in operands)
        # constant weights (the usual case) are packed once; weights fed at run time are packed at each run
        packed = self.pack(node, [i.value if i is not None else None for i in ins]) if constant else None
        directions = ins[1].shape[0]
        layout = int(node.attrs.get("layout", 0))
        wanted = [bool(name) for name in node.outputs]
        dtypes = [np.dtype(o.dtype) if o.dtype is not None else np.dtype(np.float32) for o in outs]
        n_states = len(self.states)

        geometries: dict[tuple, tuple[list, int]] = {}   # (x's shape, hidden, pool, threads) -> shapes, parts

        def geometry(x: np.ndarray, hidden: int, pool: bool) -> tuple[list, int]:
            """The output shapes and the native pool's parts of a run on ``x``."""
            width = x.shape[2]
            steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
            shapes = [(batch, steps, directions, hidden) if layout else (steps, directions, batch, hidden)]
            shapes += [(batch, directions, hidden) if layout else (directions, batch, hidden)] * n_states
            work = parallel.gemm_work(steps * batch * directions * self.gates * hidden * (width + GEMV_COST * hidden))
            parts = parallel.native_parts(work, directions if directions == 2 else steps * batch) if pool else 1
            return shapes, parts

        made = [k for k in range(1 + n_states) if k < len(wanted) and wanted[k]]   # outputs the node writes
        stored = range(len(wanted))
        first, second = (self.states + (0,))[:2]       # input indices of h0 and c0 (0: none)
        # id(outputs) -> (outputs, x's shape, R, pool, threads, results, returned tuple or None, parts): a list of
        # planned outputs (a plan's buffer set: the same list every run) whose buffers were found to fit, once
        fitted: dict[int, tuple] = {}

        def outputs_for(outputs: list, shapes: list) -> tuple[list, tuple | None]:
            """The arrays the kernel writes (planned outputs that fit, else new ones) and, when every output
            is a planned one written in place, the tuple the run returns."""
            results: list = [None, None, None]
            planned = len(outputs)
            for k in made:
                out = outputs[k] if k < planned else None
                if out is None or out.shape != shapes[k] or out.dtype != _F32 or not out.flags.c_contiguous:
                    out = np.empty(shapes[k], np.float32)
                results[k] = out
            direct = all(k < planned and outputs[k] is results[k] for k in stored)
            return results, (tuple(results[k] for k in stored) if direct else None)

        def setup(x: np.ndarray, outputs: list, r: np.ndarray, pool: bool, threads: int, layer) -> tuple:
            """The entry of ``fitted`` for this run (stored when its outputs are planned ones that fit); its last
            item: whether the native call projects X itself (the pool is on, or ``layer.projects`` the rows),
            which depends only on the layer's sizes and X's shape, both part of the entry's key."""
            key = (x.shape, r.shape[2], pool, threads)
            found = geometries.get(key)
            if found is None:
                found = geometries[key] = geometry(x, key[1], pool)
            shapes, parts = found
            results, direct = outputs_for(outputs, shapes)
            entry = (outputs, x.shape, r, pool, threads, results, direct, parts,
                     pool or layer.projects(x.shape[0] * x.shape[1]))
            if direct is not None:
                if len(fitted) >= 8:
                    fitted.clear()
                fitted[id(outputs)] = entry     # holds the list: its id stays its own while cached
            return entry

        def run(inputs, outputs):
            # NOTE: a body's LSTM runs once per iteration on one step, so this wrapper is as lean as it goes:
            # the geometry and the planned outputs are checked once per buffer set and shapes, and operands
            # already float32 and C-contiguous (the usual case) are taken as they are
            x = inputs[0]
            if x.dtype != _F32 or not x.flags.c_contiguous:
                x = np.ascontiguousarray(x, dtype=np.float32)
            threads = parallel.native_threads()
            pool = threads > 0
            layer, wt, bias = packed or self.pack(node, inputs)
            entry = fitted.get(id(outputs))
            if entry is None or entry[0] is not outputs or entry[1] != x.shape or entry[2] is not inputs[2] \
                    or entry[4] != threads:
                entry = setup(x, outputs, inputs[2], pool, threads, layer)
            results, direct, parts = entry[5], entry[6], entry[7]
            xw = None
            if not entry[8]:
                # NOTE: the pool is off (a plan of small products): BLAS then has every thread, and the linked
                # OpenBLAS's threaded GEMM inside the native call was measured 10x slower on a loaded 2-core
                # machine (its workers spin against the recurrence); numpy's GEMM projects instead, as the
                # cpu device's other native GEMMs leave the pool-off case to numpy. A small layer's short
                # sequence (projects) is projected in the call on its own register kernels, no BLAS: numpy's
                # call cost ~20 us for one row there, the native GEMV under 1
                xw = parallel.matmul(x.reshape(-1, x.shape[2]), wt)
                xw += bias
            h0 = _operand(inputs, first, _F32) if first else None
            c0 = _operand(inputs, second, _F32) if second else None
            lens = _operand(inputs, 4, _I32) if len(inputs) > 4 and inputs[4] is not None else None
            layer.run(x, xw, results[0], results[1], results[2], h0, c0, lens, parts)
            if direct is not None:
                return direct
            planned = len(outputs)
            return tuple([results[k] if k < planned and outputs[k] is results[k]
                          else _store(results[k], outputs, k, dtypes[k]) for k in stored])

        return run


class LSTMNative(_NativeRecurrent):
    """LSTM (gates i, o, f, c; activations f, g, h; peepholes; input_forget) as one native call."""

    op_type = "LSTM"
    cell = "lstm"
    gates = 4
    defaults = ("Sigmoid", "Tanh", "Tanh")
    states = (5, 6)
    peephole = 7


class GRUNative(_NativeRecurrent):
    """GRU (gates z, r, h; activations f, g; linear_before_reset) as one native call."""

    op_type = "GRU"
    cell = "gru"
    gates = 3
    defaults = ("Sigmoid", "Tanh")
    states = (5,)


class RNNNative(_NativeRecurrent):
    """RNN (one gate, activation f) as one native call."""

    op_type = "RNN"
    cell = "rnn"
    gates = 1
    defaults = ("Tanh",)
    states = (5,)


IMPLEMENTATIONS = (FastLSTMKernel, FastGRUKernel, LSTMNative, GRUNative, RNNNative)
DOMAINS = {"com.microsoft": (FastDynamicQuantizeLSTMKernel,)}
