"""Shared CPU code of the quantization, recurrent and control-flow kernels."""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from nnhal.errors import ShapeError, where
from nnhal.graph.graph import Graph, free_names
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.hostkernels.graphrun import Compiler, compile_nodes
from nnhal.hostkernels.windows import im2col
from nnhal.operator._qrc import QUANT_RANGES
from nnhal.operator.base import infer_body_graph
from nnhal.operator.table import get_prototype


# ------------------------------------------------------------- quantization
def expand_param(p: np.ndarray, x_shape: tuple, axis: int, block: int = 0) -> np.ndarray:
    """Scale or zero point reshaped (and for blocks, repeated) to broadcast against x."""
    p = np.asarray(p)
    rank = len(x_shape)
    if block <= 0:
        if p.ndim == 0 or p.size == 1:
            return p.reshape(())
        dims = [1] * rank
        dims[axis % rank] = p.size
        return p.reshape(dims)
    ax = axis % rank
    full = np.repeat(p, block, axis=ax)
    index = [slice(None)] * rank
    index[ax] = slice(0, x_shape[ax])
    return full[tuple(index)]


def saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Clip rounded values into ``dtype``'s range and convert."""
    lo, hi = QUANT_RANGES[np.dtype(dtype)]
    return np.clip(values, lo, hi).astype(dtype)


def requantize(acc: np.ndarray, factor: np.ndarray, zero: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    """round_half_even(acc * factor) + zero, saturated to ``dtype`` (acc exact in float64)."""
    y = acc * np.asarray(factor, dtype=np.float64)
    if zero is not None:
        y += np.asarray(zero, dtype=np.float64)
    return saturate(np.rint(y), dtype)


def shifted(q: np.ndarray, zero: np.ndarray | None) -> np.ndarray:
    """q - zero as float64: exact for 8- and 16-bit integers and fast through BLAS."""
    out = q.astype(np.float64)
    if zero is not None:
        out -= np.asarray(zero, dtype=np.float64)
    return out


def row_param(p: np.ndarray | None, a_shape: tuple) -> np.ndarray | None:
    """A per-row (M) parameter of matmul input A, shaped to broadcast against (..., M, N)."""
    if p is None:
        return None
    p = np.asarray(p)
    if p.ndim == 1 and p.size > 1 and len(a_shape) >= 2:
        return p.reshape(-1, 1)
    if p.size == 1:
        return p.reshape(())
    return p


def col_param(p: np.ndarray | None) -> np.ndarray | None:
    """A per-column (N) parameter of matmul input B (broadcasts along the last axis)."""
    if p is None:
        return None
    p = np.asarray(p)
    return p.reshape(()) if p.size == 1 else p


def integer_conv(node: Node, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Convolution of float64 arrays holding integers (exact): (N, C, *S) * (M, C/G, *k) -> (N, M, *out)."""
    geometry = get_prototype("", "Conv").geometry(node, x.shape, w.shape)
    group = node.attrs["group"]
    win, out_sizes = im2col(x, geometry["kernel"], geometry["strides"], geometry["dilations"], geometry["pads"])
    nb, n = x.shape[0], len(out_sizes)
    perm = (0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n))
    cols = np.ascontiguousarray(win.transpose(perm)).reshape(nb, group, -1, int(np.prod(out_sizes)))
    wg = w.reshape(group, w.shape[0] // group, -1)
    y = np.matmul(wg[None], cols)
    return y.reshape(nb, w.shape[0], *out_sizes)


def channel_param(p: np.ndarray | None, rank: int) -> np.ndarray | None:
    """A per-output-channel (axis 1) parameter shaped to broadcast against (N, M, *spatial)."""
    if p is None:
        return None
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(())
    return p.reshape((1, -1) + (1,) * (rank - 2))


def weight_zero(p: np.ndarray | None, rank: int) -> np.ndarray | None:
    """A per-output-channel (axis 0) weight zero point shaped against (M, C/G, *k)."""
    if p is None:
        return None
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(())
    return p.reshape((-1,) + (1,) * (rank - 1))


# ---------------------------------------------------------------- recurrent
Activation = Callable[[np.ndarray], np.ndarray]
Step = Callable[[int, list], list]

_NEEDS = {  # lower-case name -> (default alpha or None when unused, default beta or None)
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None), "softsign": (None, None),
    "softplus": (None, None), "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # NOTE: the two-branch form never overflows exp.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def make_activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    key = name.lower()
    if key == "relu":
        return lambda x: np.maximum(x, 0)
    if key == "tanh":
        return np.tanh
    if key == "sigmoid":
        return _sigmoid
    if key == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if key == "softplus":
        return lambda x: np.logaddexp(x, 0)
    if key == "affine":
        return lambda x: alpha * x + beta
    if key == "leakyrelu":
        return lambda x: np.where(x >= 0, x, alpha * x)
    if key == "thresholdedrelu":
        return lambda x: np.where(x > alpha, x, 0)
    if key == "scaledtanh":
        return lambda x: alpha * np.tanh(beta * x)
    if key == "hardsigmoid":
        return lambda x: np.clip(alpha * x + beta, 0, 1)
    if key == "elu":
        return lambda x: np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))
    raise ShapeError(f"unknown recurrent activation '{name}'")


def activations(node: Node, defaults: Sequence[str], directions: int,
                unclipped: Sequence[int] = ()) -> list[list[Activation]]:
    """Per direction, the activation functions (f, g, h order) with their alpha and beta.

    alpha and beta values are consumed in order by the functions that take them.
    ``clip`` bounds the input of every function except those at the positions
    in ``unclipped``.
    """
    names = list(node.attrs.get("activations") or [])
    per = len(defaults)
    if not names:
        names = list(defaults) * directions
    elif len(names) == per and directions == 2:
        names = names * 2
    alphas = list(node.attrs.get("activation_alpha") or [])
    betas = list(node.attrs.get("activation_beta") or [])
    funcs: list[Activation] = []
    for name in names:
        default_alpha, default_beta = _NEEDS[name.lower()]
        alpha = beta = None
        if default_alpha is not None:
            alpha = alphas.pop(0) if alphas else default_alpha
        if default_beta is not None:
            beta = betas.pop(0) if betas else default_beta
        funcs.append(make_activation(name, alpha, beta))
    clip = node.attrs.get("clip")
    if clip is not None:
        funcs = [f if i % per in unclipped else _clipped(f, float(clip)) for i, f in enumerate(funcs)]
    return [funcs[d * per:(d + 1) * per] for d in range(directions)]


def _clipped(f: Activation, limit: float) -> Activation:
    return lambda x: f(np.clip(x, -limit, limit))


class Recurrence:
    """Unpacks X, initial states and sequence lengths of a recurrent node and packs Y."""

    def __init__(self, node: Node, inputs: list, state_inputs: Sequence[int], hidden: int):
        self.layout = node.attrs.get("layout", 0)
        x = inputs[0]
        dtype = np.float32 if x.dtype == np.float16 else x.dtype
        self.dtype = np.dtype(dtype)
        x = x.astype(self.dtype, copy=False)
        if self.layout == 1:
            x = x.transpose(1, 0, 2)
        self.x = x
        self.steps, self.batch = x.shape[0], x.shape[1]
        self.directions = 2 if node.attrs["direction"] == "bidirectional" else 1
        self.hidden = hidden
        self.states = []
        for i in state_inputs:
            s = inputs[i] if len(inputs) > i else None
            if s is None:
                s = np.zeros((self.directions, self.batch, hidden), self.dtype)
            else:
                s = s.astype(self.dtype, copy=False)
                if self.layout == 1:
                    s = s.transpose(1, 0, 2)
            self.states.append(s)
        lens = inputs[4] if len(inputs) > 4 else None
        self.lens = None if lens is None else np.asarray(lens).astype(np.int64)
        if self.lens is not None and np.all(self.lens >= self.steps):
            self.lens = None

    def reverse(self, node: Node, d: int) -> bool:
        return d == 1 or node.attrs["direction"] == "reverse"

    def project(self, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """X W^T (+ bias) for every time step at once: (T, B, rows of W)."""
        xw = np.matmul(self.x, w.astype(self.dtype, copy=False).T)
        if bias is not None:
            xw += bias.astype(self.dtype, copy=False)
        return xw

    def run(self, reverse: bool, states: list[np.ndarray], step: Step) -> tuple[np.ndarray, list[np.ndarray]]:
        """Iterate ``step`` over time (masked by sequence_lens): Y (T, B, H) and final states.

        Steps past a batch entry's length keep its state and give zero output.
        """
        y = np.zeros((self.steps, self.batch, self.hidden), self.dtype)
        for t in (range(self.steps - 1, -1, -1) if reverse else range(self.steps)):
            new = step(t, states)
            if self.lens is not None:
                m = (t < self.lens)[:, None]
                new = [np.where(m, n, s) for n, s in zip(new, states)]
                y[t] = np.where(m, new[0], 0)
            else:
                y[t] = new[0]
            states = new
        return y, states

    def pack(self, ys: list[np.ndarray], finals: list[list[np.ndarray]], out_dtype: np.dtype) -> list[np.ndarray]:
        """Per-direction Y (T, B, H) and final states as Y (T, D, B, H), states (D, B, H), in layout."""
        y = np.stack(ys, axis=1)
        finals = [np.stack(f) for f in zip(*finals)]
        if self.layout == 1:
            y = y.transpose(2, 0, 1, 3)
            finals = [f.transpose(1, 0, 2) for f in finals]
        return [y.astype(out_dtype, copy=False)] + [f.astype(out_dtype, copy=False) for f in finals]


# ------------------------------------------------------------- control flow
class BodyRunner:
    """Runs a nested graph (If branch, Loop or Scan body) with given input and outer-scope arrays.

    Bodies are prepared once and reused across iterations and runs: a compiled plan per input shapes,
    looked up by the tuple of shapes alone (a prepared node's dtypes never change). When a second set of
    shapes of the same ranks turns up (a carried state that grows, a branch fed other sizes), one plan is
    compiled with the differing dims left unknown, and it serves every later set matching it: a loop whose
    state grows each iteration compiles twice, not once per iteration. Shared by concurrent runs: plans are
    re-entrant and the cache only grows under a lock.
    """

    MAX_CACHED = 16

    def __init__(self, body: Graph, implicit: Sequence[str], compiler: Compiler | None = None):
        self.body = body
        self.compiler = compiler or compile_nodes     # a device's own (the cpu plan), else the host's
        reads = free_names(body)
        self.implicit = [n for n in implicit if n in reads]
        self.names = list(body.inputs) + self.implicit
        self.outputs = list(body.outputs)
        self.cache: dict[tuple, object] = {}          # shapes -> plan
        self.calls: dict[tuple, Callable] = {}        # shapes -> that plan's positional run
        self.generic_runs: dict[tuple, tuple[tuple, Callable]] = {}   # ranks -> (pattern, its plan's run)
        self.generic: dict[tuple, tuple[tuple, object]] = {}   # ranks -> (shapes with None dims, plan)
        self.lock = threading.Lock()
        self.compiles = 0

    def run(self, inputs: Sequence[np.ndarray], outer: dict[str, np.ndarray], check: bool = False) \
            -> list[np.ndarray]:
        """The body's outputs for ``inputs`` (body inputs in order) and the node's outer-scope arrays."""
        arrays = list(inputs)
        if self.implicit:
            arrays += [outer[n] for n in self.implicit]
        return self.call(arrays, check)

    def call(self, arrays: list[np.ndarray], check: bool = False) -> list[np.ndarray]:
        """The body's outputs for ``arrays``: the body inputs then the implicit (outer-scope) ones, in order.
        Per iteration: the shapes' tuple, one dict lookup and the plan's positional run."""
        key = tuple([a.shape for a in arrays])
        run = self.calls.get(key)
        if run is None:
            run = self.run_for(key, arrays)
        return run(arrays, check)

    def run_for(self, key: tuple, arrays: list[np.ndarray]) -> Callable:
        """The positional run of the plan for input shapes ``key`` (of ``arrays``), compiled when new."""
        run = self.calls.get(key)
        if run is None:
            # a state that changes shape every iteration: its generic plan, found without the lock
            generic = self.generic_runs.get(tuple([len(shape) for shape in key]))
            run = generic[1] if generic is not None and _matches(generic[0], key) else self._plan_for(key, arrays)
        return run

    def iterations(self, turns: int = 2) -> Iterations:
        """The iterations of one Loop or Scan run (call ``close`` after the last, once its results are kept);
        ``turns=1``: an If's one run of a branch, whose outputs the node copies before ``close``."""
        return Iterations(self, turns)

    def _plan_for(self, key: tuple, arrays: list[np.ndarray]):
        ranks = tuple(len(shape) for shape in key)
        with self.lock:
            generic = self.generic.get(ranks)
            seen = [k for k in self.cache if tuple(len(s) for s in k) == ranks]
        if generic is not None and _matches(generic[0], key):
            plan = generic[1]
        elif seen or generic is not None:
            pattern = _merge([generic[0]] if generic is not None else seen[:1], key)
            plan = self._compile(arrays, pattern)
            with self.lock:
                self.generic[ranks] = (pattern, plan)
        else:
            plan = self._compile(arrays, key)
        run = _positional(plan, self.names, self.outputs)
        with self.lock:
            if ranks in self.generic:
                self.generic_runs[ranks] = (self.generic[ranks][0], _positional(self.generic[ranks][1], self.names,
                                                                                 self.outputs))
            if len(self.cache) >= self.MAX_CACHED:
                self.calls.pop(next(iter(self.cache)), None)
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = plan
            self.calls[key] = run
        return run

    def _compile(self, arrays: list[np.ndarray], shapes: tuple):
        graph = self.body.copy()
        for name, a, shape in zip(self.names, arrays, shapes):
            t = graph.tensors.get(name)
            if t is None or name in self.implicit:
                t = graph.tensors[name] = Tensor(name, kind=TensorKind.INPUT)
            t.dtype, t.shape = a.dtype, tuple(shape)
        infer_body_graph(graph)
        self.compiles += 1
        return self.compiler(graph, graph.nodes, self.names, graph.outputs)


class Iterations:
    """One Loop or Scan run's iterations of a body (or an If's one run of a branch). A plan that holds its buffers
    across iterations (its ``iterate()``: the cpu plan's Iteration, two buffer sets taken in turn, one for a
    branch) runs them that way, so its outputs may be its own buffers rather than per-iteration copies; any other
    plan runs as :meth:`BodyRunner.call`. Every output is valid until the iteration after next (a branch's: until
    ``close``): the driver copies what it keeps longer."""

    def __init__(self, runner: BodyRunner, turns: int = 2):
        self.runner, self.turns = runner, turns
        self.key: tuple | None = None
        self.run: Callable | None = None
        self.held: dict[int, object] = {}      # id(plan) -> its iteration, for the plans used in this run

    def call(self, arrays: list[np.ndarray], check: bool = False) -> list[np.ndarray]:
        """One iteration: the body's outputs for ``arrays`` (body inputs, then the implicit ones)."""
        key = tuple([a.shape for a in arrays])
        if key != self.key:
            self.key, self.run = key, self._turns(self.runner.run_for(key, arrays))
        return self.run(arrays, check)

    def _turns(self, run: Callable) -> Callable:
        plan = getattr(run, "__self__", None)        # a plan's bound ``call`` (see _positional)
        iterate = getattr(plan, "iterate", None)
        if iterate is None:
            return run
        held = self.held.get(id(plan))
        if held is None:
            held = self.held[id(plan)] = iterate(self.turns)
        return held.call

    def close(self) -> None:
        """Release what the plans held for this run."""
        for held in self.held.values():
            held.close()
        self.held.clear()


def _positional(plan, names: list[str], outputs: list[str]):
    """``plan``'s positional run (its ``call``), or one made from its ``run`` over a dict for a runnable without."""
    call = getattr(plan, "call", None)
    if call is not None:
        return call

    def run(arrays: list[np.ndarray], check: bool = False) -> list[np.ndarray]:
        values = dict(zip(names, arrays))
        plan.run(values, check)
        return [values[n] for n in outputs]

    return run


def _matches(pattern: tuple, key: tuple) -> bool:
    return all(p is None or p == d for ps, ks in zip(pattern, key) for p, d in zip(ps, ks))


def _merge(patterns: list[tuple], key: tuple) -> tuple:
    """Shapes keeping the dims every one of ``patterns`` and ``key`` agree on, None elsewhere."""
    merged = []
    for j, shape in enumerate(key):
        dims = list(shape)
        for p in patterns:
            dims = [d if q == d else None for d, q in zip(dims, p[j])]
        merged.append(tuple(dims))
    return tuple(merged)


class Stacked:
    """A scan output written in place, iteration by iteration: row ``t`` of ``axis`` of one array, the planned
    output when its shape fits, else one allocated at the first iteration when the number of iterations is
    known (``count``); with an unknown count, the rows are kept and stacked at the end."""

    def __init__(self, node: Node, planned: np.ndarray | None, count: int | None, axis: int = 0,
                 reverse: bool = False):
        self.node, self.planned, self.count, self.axis, self.reverse = node, planned, count, axis, reverse
        self.out: np.ndarray | None = None
        self.rows: np.ndarray | None = None         # ``out`` with ``axis`` moved first: rows[t] is a view
        self.row_shape: tuple = ()                   # rows[t].shape, checked per iteration
        self.parts: list[np.ndarray] = []
        self.n = 0

    def add(self, r: np.ndarray) -> None:
        """The next iteration's output ``r``."""
        rows = self.rows
        if rows is None:
            if self.count is None:
                self.parts.append(own(r))     # a body output lives until the iteration after next
                self.n += 1
                return
            rows = self._open(np.asarray(r))
        if r.shape != self.row_shape:
            raise ShapeError(f"{where(self.node)}: scan output shapes differ across iterations: "
                             f"{self.row_shape} and {r.shape}")
        rows[self.count - 1 - self.n if self.reverse else self.n] = r
        self.n += 1

    def _open(self, first: np.ndarray) -> np.ndarray:
        axis = self.axis % (first.ndim + 1)
        shape = first.shape[:axis] + (self.count,) + first.shape[axis:]
        out = self.planned
        if out is None or out.shape != shape or out.dtype != first.dtype:
            out = np.empty(shape, first.dtype)
        self.out, self.rows = out, np.moveaxis(out, axis, 0)
        self.row_shape = self.rows.shape[1:]
        return self.rows

    def result(self, empty: tuple, dtype) -> np.ndarray:
        """The stacked output (``empty``-shaped of ``dtype`` after no iteration)."""
        if self.out is not None:      # opened at the first of exactly ``count`` iterations
            return self.out
        if not self.parts:
            return np.zeros(empty, dtype or np.float32)
        parts = self.parts[::-1] if self.reverse else self.parts
        if any(p.shape != parts[0].shape for p in parts):
            raise ShapeError(f"{where(self.node)}: scan output shapes differ across iterations: "
                             f"{sorted({p.shape for p in parts})}")
        return np.stack(parts, axis=self.axis % (parts[0].ndim + 1))


def outer_values(node: Node, inputs: list) -> dict[str, np.ndarray]:
    """The implicit (outer-scope) input arrays of a control-flow node by name."""
    return dict(zip(node.implicit_inputs, inputs[len(node.inputs):]))


def own(array: np.ndarray) -> np.ndarray:
    """A fresh copy: body results may alias node inputs or a body's cached constants."""
    return np.array(array, copy=True)


def check_bool(node: Node, value: np.ndarray, what: str) -> bool:
    if type(value) is np.ndarray and value.size == 1:      # the common case, per iteration: no conversion
        return bool(value.reshape(()))
    value = np.asarray(value)
    if value.size != 1:
        raise ShapeError(f"{where(node)}: {what} must hold one element, got shape {value.shape}")
    return bool(value.reshape(()))
