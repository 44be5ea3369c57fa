"""Quantizing transformers: what the core does before placement under int8/uint8.

Trained transformers have activation outliers: a few channels of the
LayerNorm outputs and of the GELU output are 10-100x larger than the rest, so
one per-tensor scale wastes most of the 8-bit levels on them (BERT's int8
cosine fell to 0.4). ``plan_int8`` answers with four explicit steps, each
reported per node:

1. token products as Gemm: ``MatMul(x[..., K], W[K, N]) (+ bias[N])`` over
   token sequences (rank >= 3) becomes Reshape -> Gemm(W, bias) -> Reshape,
   so the bias is folded into the integer product (int32) and every device
   that runs 2-D Gemm (the CPU's QLinearConv lowering, the vnpu) takes it.
2. smoothing (SmoothQuant, Xiao et al. 2023): for the Gemms reading one
   activation X, ``X W = (X / s)(diag(s) W)`` with ``s_j = max|X_j|^a /
   max|W_j|^(1-a)``: the outlier channels' range moves into the weights,
   which are quantized per output channel. ``a`` is chosen per activation on
   the calibration statistics (per-channel extremes): the one that minimizes
   the predicted output quantization noise of a per-tensor activation scale
   and per-channel weight scales; or, when rows of the activations are at
   hand (the inputs calibrate at prepare, no table) and every device of the
   context quantizes dynamically, the one whose measured output error on
   those rows under the CPU's per-block dynamic quantization is least
   (``_measured_alpha``). ``X / s`` is a float Mul (kept on the CPU).
3. dynamic per-token activations: those Gemms are marked ``dynamic`` (with the
   few outlier output columns, if any, to compute in float); a device
   whose Description lists "dynamic" in ``activation_quantization`` (the CPU)
   quantizes each row at run time with its own scale per block of 8 columns
   (``quantize.BLOCK``; the weights per output channel and block) or per whole
   row, as its Description's ``dynamic_block`` says (the CPU with integer kernels); others
   (the vnpu) use the calibrated per-tensor scale of the smoothed activation.
4. what stays higher: normalizations, softmax, GELU/Erf, reductions, and
   every elementwise Add/Sub/Mul/Div connected to them (residual adds into
   LayerNorm, the attention mask add, GELU's arithmetic, the smoothing Muls);
   matrix products of two activations (attention scores and context). These
   run in float32 on the CPU; other devices are declined with the reason.

Convolutional models are unchanged: their Conv/Gemm have no token axis, and
a residual Add feeding a Relu is not connected to a normalization.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, constant
from nnhal.optimizer.infer import infer_graph

# ops computed in float32 under a quantized precision (range, exponent or accumulation sensitive)
HIGHER_OPS = {
    "LayerNormalization": "a normalization: mean and variance need float range",
    "BatchNormalization": "a normalization: mean and variance need float range",
    "InstanceNormalization": "a normalization: mean and variance need float range",
    "GroupNormalization": "a normalization: mean and variance need float range",
    "RMSNormalization": "a normalization: mean and variance need float range",
    "SkipLayerNormalization": "a normalization: mean and variance need float range",
    "Softmax": "softmax: exponentials of logits need float range",
    "LogSoftmax": "softmax: exponentials of logits need float range",
    "Gelu": "GELU: a smooth nonlinearity near zero, where 8-bit steps are coarse",
    "Erf": "GELU: a smooth nonlinearity near zero, where 8-bit steps are coarse",
    "Tanh": "tanh: a smooth nonlinearity", "Exp": "an exponential", "Log": "a logarithm",
    "Pow": "a power (a decomposed normalization)", "Sqrt": "a square root (a decomposed normalization)",
    "ReduceMean": "a reduction (a decomposed normalization or a pooling)", "ReduceSum": "a reduction",
    "ReduceL2": "a reduction (an L2 normalization)",
}
ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Sum", "Clip"})     # Clip: the guards of a division
ALPHAS = np.linspace(0.3, 0.85, 12)
# NOTE: the measured choice tries fewer alphas (each costs a quantized product per Gemm on SAMPLE_ROWS rows);
# on MiniLM it picks 0-0.7 per activation and the summed per-node error of the 36 dynamic products falls
# from 1.61% (the per-tensor noise model's choices) to 1.41% on held-out sentences (BLOCK 16; 1.15% at 8)
MEASURED_ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
SAMPLE_ROWS = 256
# NOTE: an output whose whole range exceeds its median channel's range this many times (BERT's FFN output:
# 30-250x, a few outlier dimensions) loses its ordinary channels to one per-tensor 8-bit scale; such a
# product needs float output (dynamic quantization) and declines devices that only quantize statically.
OUTPUT_SPREAD = 16.0
# NOTE: LLM.int8()'s remedy on the output side: the few output columns whose range exceeds FLOAT_COLUMN
# times the median column's (the outlier dimensions of the residual stream) are computed in float by the
# dynamic Gemm, from float weights; at most MAX_FLOAT_COLUMNS of them.
FLOAT_COLUMN = 8.0
MAX_FLOAT_COLUMNS = 16


@dataclass
class NodeChoice:
    """What a quantized precision does with one node, and why."""

    node: str
    op_type: str
    mode: str           # "int8 static", "int8 dynamic per-token (static where unsupported)", "fp32", "as the device"
    reason: str


@dataclass
class Int8Plan:
    """The result of ``plan_int8``: per-node choices and what placement and lowering need."""

    higher: dict[str, str] = field(default_factory=dict)       # node -> why it stays fp32
    required: dict[str, str] = field(default_factory=dict)     # node -> why only dynamic quantization holds
    # Gemms that take per-token activation scales -> the output columns (outlier dimensions) they keep in float
    dynamic: dict[str, tuple[int, ...]] = field(default_factory=dict)
    smoothing: dict[str, float] = field(default_factory=dict)  # activation -> alpha
    measured: dict[str, int] = field(default_factory=dict)     # activation -> rows its alpha was measured on
    aliases: dict[str, str] = field(default_factory=dict)      # new tensor -> the calibrated tensor it equals
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)   # ranges of new tensors (x / s)
    float_columns: dict[str, tuple[int, ...]] = field(default_factory=dict)
    choices: list[NodeChoice] = field(default_factory=list)
    block: int | None = None    # the dynamic products' block along K as the devices run them (Description)

    def table(self) -> str:
        """One line per node: name, op, mode, reason."""
        return "\n".join(f"{c.node:<40} {c.op_type:<20} {c.mode:<14} {c.reason}" for c in self.choices)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.choices:
            out[c.mode] = out.get(c.mode, 0) + 1
        return out


def plan_int8(graph: Graph, channels: dict[str, tuple] | None, samples: dict[str, np.ndarray] | None = None,
              signed: bool = False, alphas: dict | None = None, block: int | None = None) -> Int8Plan:
    """Rewrite ``graph`` (already inferred; a copy the core owns) for a quantized precision.

    ``channels``: per-channel (last axis) extremes of activations from calibration; None or missing
    entries leave the activations unsmoothed (reported). ``samples``: rows [R, K] of those activations
    (``token_statistics``); where given, smoothing's alpha is measured under dynamic per-block quantization
    (activations int8 when ``signed``, else uint8) instead of predicted for a per-tensor scale. ``alphas``:
    a dict that keeps those measured choices for later plans of the same graph on the same samples (the
    probes of a mixed search). ``block``: the devices' Description.dynamic_block (None: quantize.BLOCK)."""
    plan = Int8Plan(block=block)
    channels = {n: (np.asarray(lo, np.float64), np.asarray(hi, np.float64)) for n, (lo, hi) in (channels or {}).items()}
    linear = _linearize(graph, plan)
    _smooth(graph, linear, channels or {}, plan, samples or {}, signed, {} if alphas is None else alphas)
    _require_dynamic(graph, linear, channels or {}, plan)
    infer_graph(graph, fold=False)
    _choose(graph, linear, plan)
    return plan


def token_activations(graph: Graph) -> list[str]:
    """The activations token products read and write (their bias Add's output): what smoothing and the
    output-spread test need per-channel extremes of."""
    readers = graph.consumers()
    names = set()
    for n in graph.nodes:
        if _token_matmul(graph, n) is not None:
            after = readers.get(n.outputs[0], [])
            names.add(n.inputs[0])
            names.add(after[0].outputs[0] if len(after) == 1 and _bias_of(graph, after[0], n.outputs[0],
                      graph.tensors[n.inputs[1]].value.shape[1]) is not None else n.outputs[0])
    return sorted(names)


def token_statistics(graph: Graph, feeds: dict[str, np.ndarray], names: list[str], rows: int = SAMPLE_ROWS
                     ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray]]:
    """(per-channel min and max, up to ``rows`` rows [R, K] evenly spread over the tokens) of each of
    ``names`` over one fp32 CPU run of ``graph`` on ``feeds``."""
    from nnhal.device.manager import graph_compiler

    if not names:
        return {}, {}
    values = dict(feeds)
    graph_compiler()(graph, graph.nodes, list(graph.inputs), names).run(values)
    extremes, samples = {}, {}
    for name in names:
        flat = np.asarray(values[name]).reshape(-1, values[name].shape[-1])
        extremes[name] = (flat.min(axis=0).astype(np.float64), flat.max(axis=0).astype(np.float64))
        if rows and flat.dtype == np.float32 and len(flat):
            pick = np.unique(np.linspace(0, len(flat) - 1, min(rows, len(flat))).astype(np.int64))
            samples[name] = np.ascontiguousarray(flat[pick])
    return extremes, samples


# ---------------------------------------------------------------------- 1. token products as Gemm
def _linearize(graph: Graph, plan: Int8Plan) -> dict[str, str]:
    """MatMul over token sequences (+ constant bias Add) -> Reshape, Gemm, Reshape. Returns Gemm -> its x."""
    from nnhal.optimizer.precision import make_node

    readers = graph.consumers()
    opset = graph.opsets.get("", 17)
    nodes: list[Node] = []
    gone: set[str] = set()
    linear: dict[str, str] = {}
    for node in graph.nodes:
        if node.name in gone:
            continue
        shape = _token_matmul(graph, node)
        if shape is None:
            nodes.append(node)
            continue
        x, w = node.inputs[0], graph.tensors[node.inputs[1]].value
        out, bias = node.outputs[0], None
        after = readers.get(out, [])
        if len(after) == 1 and out not in graph.outputs and _bias_of(graph, after[0], out, w.shape[1]) is not None:
            bias = _bias_of(graph, after[0], out, w.shape[1])
            gone.add(after[0].name)
            out = after[0].outputs[0]
        base = node.name
        flat_x, flat_y = f"{x}::{base}::2d", f"{out}::2d"
        graph.tensors[flat_x] = Tensor(flat_x)
        graph.tensors[flat_y] = Tensor(flat_y)
        k, n = w.shape
        into = _const(graph, f"{base}::shape2d", np.array([-1, k], np.int64))
        back = _const(graph, f"{base}::shape", np.array([*shape[:-1], n], np.int64))
        params = [_const(graph, f"{base}::weight", np.ascontiguousarray(w.T))]
        if bias is not None:
            params.append(_const(graph, f"{base}::bias", bias))
        nodes.append(make_node(f"{base}::to2d", "Reshape", [x, into], [flat_x], {}, opset))
        nodes.append(make_node(base, "Gemm", [flat_x, *params], [flat_y], {"transB": 1}, opset))
        nodes.append(make_node(f"{base}::back", "Reshape", [flat_y, back], [out], {}, opset))
        plan.aliases[flat_x], plan.aliases[flat_y] = x, out
        linear[base] = x
    graph.nodes = nodes
    return linear


def _token_matmul(graph: Graph, node: Node) -> tuple[int, ...] | None:
    """The static shape of x when ``node`` is MatMul(x[..., K] of rank >= 3, constant float W[K, N])."""
    if node.domain or node.op_type != "MatMul":
        return None
    x, w = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    if not w.is_constant or w.value is None or w.value.ndim != 2 or w.value.dtype != np.float32:
        return None
    if x.is_constant or x.shape is None or len(x.shape) < 3 or any(not isinstance(d, int) for d in x.shape):
        return None
    return tuple(x.shape)


def _bias_of(graph: Graph, add: Node, operand: str, n: int) -> np.ndarray | None:
    if add.domain or add.op_type != "Add" or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] == operand else add.inputs[0]
    t = graph.tensors[other]
    if not t.is_constant or t.value is None or t.value.dtype != np.float32 or t.value.size != n:
        return None
    if t.value.ndim > 1 and any(d != 1 for d in t.value.shape[:-1]):
        return None
    return t.value.reshape(n)


def _const(graph: Graph, name: str, value: np.ndarray) -> str:
    graph.tensors[name] = constant(name, value)
    return name


# ---------------------------------------------------------------------- 2. smoothing
def _smooth(graph: Graph, linear: dict[str, str], channels: dict[str, tuple[np.ndarray, np.ndarray]],
            plan: Int8Plan, samples: dict[str, np.ndarray], signed: bool, alphas: dict) -> None:
    """Per activation read by token Gemms: the alpha and scales that minimize predicted (or, with a sample of
    its rows, measured) noise; X / s inserted."""
    from nnhal.optimizer.precision import make_node

    by_x: dict[str, list[Node]] = {}
    gemms = {n.name: n for n in graph.nodes if n.name in linear}
    for name, x in linear.items():
        by_x.setdefault(x, []).append(gemms[name])
    opset = graph.opsets.get("", 17)
    for x, users in by_x.items():
        stats = channels.get(x)
        weights = [graph.tensors[g.inputs[1]].value for g in users]      # [N, K] each
        if stats is None or stats[0].shape != (weights[0].shape[1],):
            continue
        amax = np.maximum(np.abs(stats[0]), np.abs(stats[1]))
        wmax = np.max(np.abs(np.concatenate(weights, axis=0)), axis=0)
        sample = samples.get(x)
        if sample is not None and sample.shape[1:] == amax.shape:
            key = (x, signed, plan.block)
            if key not in alphas:
                alphas[key] = _measured_alpha(sample, amax, wmax, weights, signed, plan.block)
            alpha, s = alphas[key]
            plan.measured[x] = len(sample)
        else:
            alpha, s = _best_alpha(amax, wmax, weights)
        if s is None:
            continue
        plan.smoothing[x] = alpha
        scaled = f"{x}::smoothed"
        graph.tensors[scaled] = Tensor(scaled)
        inv = _const(graph, f"{x}::smooth_scale", (1.0 / s).astype(np.float32))
        mul = make_node(f"{x}::smooth", "Mul", [x, inv], [scaled], {}, opset)
        first = min(graph.nodes.index(_reshape_of(graph, g)) for g in users)
        graph.nodes.insert(first, mul)
        for g in users:
            _reshape_of(graph, g).inputs[0] = scaled
            w = graph.tensors[g.inputs[1]]
            graph.tensors[g.inputs[1]] = constant(w.name, (w.value * s[None, :]).astype(np.float32))
            plan.aliases[_reshape_of(graph, g).outputs[0]] = scaled
        plan.ranges[scaled] = (float(np.min(stats[0] / s)), float(np.max(stats[1] / s)))
        plan.higher[mul.name] = f"SmoothQuant's activation scaling of '{x}' (alpha {alpha:.2f}): float, on the CPU"


def _reshape_of(graph: Graph, gemm: Node) -> Node:
    return next(n for n in graph.nodes if n.outputs and n.outputs[0] == gemm.inputs[0])


def _best_alpha(amax: np.ndarray, wmax: np.ndarray, weights: list[np.ndarray]) -> tuple[float, np.ndarray | None]:
    """The alpha (and scales) minimizing the predicted output noise of X/s (per tensor) times sW (per channel).

    NOTE: the noise model: activation step d = max_j |x_j|/s_j / 127 adds d^2/12 * sum_j (s_j W_jn)^2 to
    output n; weight step e_n = max_j |s_j W_jn| / 127 adds e_n^2/12 * sum_j (x_j/s_j)^2, with x_j at
    half its channel's peak. alpha 0 (no smoothing) competes too.
    """
    keep = (amax > 0) & (wmax > 0)
    if keep.sum() < 2:
        return 0.0, None
    best, best_noise, best_s = 0.0, np.inf, None
    for alpha in np.concatenate([[0.0], ALPHAS]):
        s = _scales(amax, wmax, keep, alpha)
        xs = amax / s
        step_x = xs.max() / 127.0
        noise = 0.0
        for w in weights:
            sw = w * s[None, :]
            step_w = np.abs(sw).max(axis=1) / 127.0
            noise += float(np.sum(step_x ** 2 / 12.0 * np.sum(sw ** 2, axis=1))
                           + np.sum(step_w ** 2 / 12.0) * float(np.sum((xs / 2.0) ** 2)))
        if noise < best_noise * 0.98:
            best, best_noise, best_s = float(alpha), noise, s
    return best, (None if best == 0.0 else best_s)


def _scales(amax: np.ndarray, wmax: np.ndarray, keep: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's s_j = amax_j^alpha / wmax_j^(1 - alpha), normalized to geometric mean 1 (ranges stay sane)."""
    s = np.ones_like(amax)
    s[keep] = amax[keep] ** alpha / wmax[keep] ** (1.0 - alpha)
    return np.clip(s / np.exp(np.mean(np.log(s[keep]))), 1e-4, 1e4)


def _measured_alpha(x: np.ndarray, amax: np.ndarray, wmax: np.ndarray, weights: list[np.ndarray],
                    signed: bool = False, preferred: int | None = None) -> tuple[float, np.ndarray | None]:
    """The alpha (and scales) whose products, quantized as the CPU's dynamic Gemm does them (activations
    int8 or uint8 per row and block, weights int8 per channel and block), err least on the sample rows ``x``
    [R, K]:
    the sum over the Gemms of ``||Q(x / s) Q(s W)^T - x W^T||^2 / ||x W^T||^2``. Alpha 0 (no smoothing, no
    extra Mul) wins unless another is 2% better.

    NOTE: measured, not modelled, because a dynamic block's scale follows its own peak: the per-tensor noise
    model of ``_best_alpha`` over-smooths (it prices every channel by the largest one). The weights are
    rounded at their peak here, a cheaper proxy for the MSE clipping of ``per_block_int8`` (11 roundings)."""
    from nnhal.optimizer.quantize import dynamic_block, fake_quantize_blocks

    keep = (amax > 0) & (wmax > 0)
    if keep.sum() < 2:
        return 0.0, None
    block = dynamic_block(x.shape[1], preferred)
    references = [x @ w.T for w in weights]
    norms = [max(float(np.sum(np.square(r, dtype=np.float64))), 1e-30) for r in references]

    def error(s: np.ndarray | None) -> float:
        s32 = None if s is None else s.astype(np.float32)
        xq = fake_quantize_blocks(x if s32 is None else x / s32, signed, block)
        total = 0.0
        for w, ref, norm in zip(weights, references, norms):
            wq = fake_quantize_blocks(w if s32 is None else w * s32, True, block)   # int8 per channel and block
            diff = (xq @ wq.T - ref).ravel()
            total += float(np.dot(diff, diff)) / norm
        return total

    best, best_err, best_s = 0.0, error(None), None
    for alpha in MEASURED_ALPHAS:
        s = _scales(amax, wmax, keep, alpha)
        err = error(s)
        if err < best_err * (0.98 if best_s is None else 1.0):
            best, best_err, best_s = float(alpha), err, s
    return best, best_s


def _require_dynamic(graph: Graph, linear: dict[str, str], channels: dict[str, tuple[np.ndarray, np.ndarray]],
                     plan: Int8Plan) -> None:
    """Token products whose output range spread exceeds OUTPUT_SPREAD need dynamic (float-output) quantization;
    the Reshapes around them stay in float with them."""
    for node in graph.nodes:
        if node.name not in linear:
            continue
        out = plan.aliases.get(node.outputs[0])
        if out not in channels:
            continue
        lo, hi = channels[out]
        width = hi - lo
        wide = np.flatnonzero(width > FLOAT_COLUMN * max(float(np.median(width)), 1e-12))
        if 0 < wide.size <= MAX_FLOAT_COLUMNS:
            plan.float_columns[node.name] = tuple(int(c) for c in wide)
        spread = float(np.max(hi) - np.min(lo)) / max(float(np.median(hi - lo)), 1e-12)
        if spread > OUTPUT_SPREAD:
            plan.required[node.name] = (f"its output's range is {spread:.0f}x its median channel's (outlier "
                                        f"dimensions): one static 8-bit scale would erase the other channels")
            for name in (f"{node.name}::to2d", f"{node.name}::back"):
                plan.higher[name] = f"reshape around '{node.name}', which keeps float output"


# ---------------------------------------------------------------------- 3./4. per-node choices
def _choose(graph: Graph, linear: dict[str, str], plan: Int8Plan) -> None:
    producers = graph.producers()
    readers = graph.consumers()
    higher_core = {n.name: HIGHER_OPS[n.op_type] for n in graph.nodes if not n.domain and n.op_type in HIGHER_OPS}
    # elementwise arithmetic connected (through arithmetic only) to a higher op stays with it
    arith = {n.name: n for n in graph.nodes if not n.domain and n.op_type in ARITHMETIC}
    seen: set[str] = set()
    for start in arith:
        if start in seen or start in plan.higher:
            continue
        group, stack, touches = [], [start], ""
        seen.add(start)
        while stack:
            node = arith[stack.pop()]
            group.append(node.name)
            near = [producers.get(i) for i in node.inputs if i] + [r for o in node.outputs for r in readers.get(o, [])]
            for other in near:
                if other is None:
                    continue
                if other.name in higher_core and not touches:
                    touches = f"{other.op_type} '{other.name}'"
                if other.name in arith and other.name not in seen:
                    seen.add(other.name)
                    stack.append(other.name)
        if touches:
            for name in group:
                plan.higher[name] = f"arithmetic feeding or fed by {touches} (residual, mask or GELU path)"
    plan.higher.update(higher_core)
    dynamic: dict[str, tuple[int, ...]] = {}
    for node in graph.nodes:
        if node.name in plan.higher:
            plan.choices.append(NodeChoice(node.name, node.op_type, "fp32", plan.higher[node.name]))
        elif node.name in linear:
            x = linear[node.name]
            measured = f"measured on {plan.measured[x]} rows" if x in plan.measured else ""
            if x in plan.smoothing:
                how = f"smoothed (alpha {plan.smoothing[x]:.2f}{', ' + measured if measured else ''})"
            else:
                how = f"not smoothed ({measured}: smoothing does not pay)" if measured else "not smoothed"
            dynamic[node.name] = plan.float_columns.get(node.name, ())
            if dynamic[node.name]:
                how += f", output columns {list(dynamic[node.name])} in float (outlier dimensions)"
            if node.name in plan.required:
                plan.choices.append(NodeChoice(node.name, node.op_type, "int8 dynamic",
                                               f"token product, {how}; needs dynamic: {plan.required[node.name]}"))
            else:
                plan.choices.append(NodeChoice(node.name, node.op_type, "int8 dynamic",
                                               f"token product, {how}; per-token activation scales where the "
                                               "device supports dynamic quantization, else calibrated per tensor"))
        elif node.op_type in ("MatMul", "Gemm", "Conv") and not node.domain:
            two = node.op_type == "MatMul" and not graph.tensors[node.inputs[1]].is_constant
            if two:
                plan.higher[node.name] = "product of two activations (attention scores or context)"
                plan.choices.append(NodeChoice(node.name, node.op_type, "fp32", plan.higher[node.name]))
            else:
                plan.choices.append(NodeChoice(node.name, node.op_type, "int8 static",
                                               "weights per output channel, activations per tensor"))
    plan.dynamic = dynamic
