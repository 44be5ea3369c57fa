"""Precision passes a device's ``optimize_graph`` calls: fp16 and int8/uint8.

``to_fp16`` is for a device that stores and computes fp16 itself (the CPU
uses ``fp16.to_fp16_storage`` instead: float32 compute is faster in numpy).
It rewrites a subgraph so every float tensor is stored as float16.
Ops that accumulate or need range (convolutions and matrix products,
softmax, normalizations, reductions, exp/log) are computed in float32 between
a Cast up and a Cast down, as fp16 hardware accumulates in fp32; everything
else computes in float16. The subgraph gets a graph of its own (the shared
graph is untouched) and declares float16 boundaries, which the core converts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
from onnx import TensorProto

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Format, Subgraph
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.optimizer.infer import infer_graph
from nnhal.optimizer.nodes import make_node  # noqa: F401  (re-exported: the optimizer's passes import it from here)
from nnhal.optimizer.qtables import ELEMENTWISE

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
FP16_MAX = float(np.finfo(np.float16).max)

FP32_OPS = frozenset({
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "Softmax", "LogSoftmax", "Hardmax",
    "LayerNormalization", "BatchNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization",
    "LpNormalization", "MeanVarianceNormalization", "LRN", "ReduceMean", "ReduceSum", "ReduceSumSquare",
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd", "GlobalAveragePool", "AveragePool",
    "LpPool", "GlobalLpPool", "CumSum", "CumProd", "Exp", "Log", "Pow", "Erf", "Attention",
})


def subgraph_graph(sg: Subgraph) -> Graph:
    """A graph of the subgraph's own: copies of its nodes and of every tensor they touch."""
    src = sg.graph
    names = {n for node in sg.nodes for n in node.all_inputs + node.outputs if n}
    tensors = {n: replace(src.tensors[n]) for n in names}
    nodes = [replace(n, inputs=list(n.inputs), outputs=list(n.outputs), attrs=dict(n.attrs),
                     implicit_inputs=list(n.implicit_inputs)) for n in sg.nodes]
    return Graph(f"{src.name}#{sg.index}", tensors, nodes, list(sg.inputs), list(sg.outputs), dict(src.opsets),
                 src.outer)


def half(value: np.ndarray) -> np.ndarray:
    """``value`` as float16, saturating finite values to +-65504 (as ONNX Runtime's fp16 converter)."""
    value = np.asarray(value)
    finite = np.isfinite(value)
    if finite.all():
        return np.clip(value, -FP16_MAX, FP16_MAX).astype(F16)
    return np.where(finite, np.clip(value, -FP16_MAX, FP16_MAX), value).astype(F16)


def map_bodies(node: Node, rewrite: Callable[[Graph], Graph]) -> None:
    """Replace each graph attribute (If branches, Loop and Scan bodies) of ``node`` by ``rewrite(copy)``."""
    for key, value in node.attrs.items():
        if isinstance(value, Graph):
            node.attrs[key] = rewrite(value.copy())


def to_fp16(sg: Subgraph) -> Subgraph:
    """Rewrite ``sg`` to float16 storage with float32 compute where it matters.

    If, Loop and Scan bodies are rewritten the same way (their constants,
    casts and inputs), so a body never hands a float32 value to float16 code.
    """
    g = _half_graph(subgraph_graph(sg), sg.graph.opsets.get("", 17))
    infer_graph(g, fold=False, check_types=False)
    sg.graph, sg.nodes = g, g.nodes
    for names, formats in ((sg.inputs, sg.input_formats), (sg.outputs, sg.output_formats)):
        for name in names:
            if g.tensors[name].dtype == F16:
                formats[name] = Format(F16)
    sg.precision = "fp16"
    return sg


def _half_graph(g: Graph, opset: int) -> Graph:
    """``g`` (a copy) and its bodies with float16 storage and float32 compute where it matters."""
    for name, t in g.tensors.items():
        if t.dtype == F32:
            g.tensors[name] = replace(t, dtype=F16, value=None if t.value is None else half(t.value))
    up: dict[str, str] = {}
    nodes: list[Node] = []

    def to_f32(name: str) -> str:
        if name not in up:
            t = g.tensors[name]
            up[name] = f"{name}::fp32"
            if t.kind is TensorKind.CONSTANT:
                g.tensors[up[name]] = Tensor(up[name], F32, t.shape, TensorKind.CONSTANT, t.value.astype(F32))
            else:
                g.tensors[up[name]] = Tensor(up[name])
                nodes.append(_cast(f"{name}::to_fp32", name, up[name], TensorProto.FLOAT, opset))
        return up[name]

    for node in g.nodes:
        map_bodies(node, lambda body: _half_graph(body, opset))
        if node.op_type == "Cast" and not node.domain and node.attrs.get("to") in (TensorProto.FLOAT, "FLOAT"):
            node.attrs["to"] = TensorProto.FLOAT16
        if node.op_type == "ConstantOfShape" and isinstance(node.attrs.get("value"), np.ndarray) \
                and node.attrs["value"].dtype == F32:
            node.attrs["value"] = half(node.attrs["value"])
        if node.op_type not in FP32_OPS or node.domain:
            nodes.append(node)
            continue
        node.inputs = [to_f32(n) if n and g.tensors[n].dtype == F16 else n for n in node.inputs]
        downs = []
        for i, out in enumerate(node.outputs):
            if out and g.tensors[out].dtype == F16:
                wide = f"{out}::fp32"
                g.tensors[wide] = Tensor(wide)
                node.outputs[i] = wide
                downs.append(_cast(f"{out}::to_fp16", wide, out, TensorProto.FLOAT16, opset))
        nodes.append(node)
        nodes.extend(downs)
    g.nodes = nodes
    return g


def _cast(name: str, src: str, dst: str, to: int, opset: int) -> Node:
    return make_node(name, "Cast", [src], [dst], {"to": to}, opset)


# ----------------------------------------------------------------- int8/uint8
QUANT_DTYPE = {"uint8": np.dtype(np.uint8), "int8": np.dtype(np.int8)}
# ops whose result on the integers equals the quantized result in float (same parameters)
MOVES = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "MaxPool", "GlobalMaxPool"})
INTEGER_SINCE = {"MaxPool": 12}      # the first opset whose schema lets the op take int8/uint8


def to_quantized(sg: Subgraph, precision: str, dynamic: bool = False, conv_levels: int = 127,
                 float_conv: Callable[[Node, Graph], bool] | None = None) -> Subgraph:
    """Rewrite ``sg`` for integer execution with standard ONNX quantized operators.

    Conv, and Gemm / 2-D MatMul with constant weights (as 1x1 QLinearConv), run
    as QLinearConv: activations in ``precision`` per tensor (the calibrated
    ``Tensor.quant``), weights int8 symmetric per output channel, int32 bias,
    exact integer accumulation. A Relu or Clip(0, ...) that alone follows one
    is absorbed by the saturation of its output range. Add, Sum of two, Mul,
    Concat and the average pools run as the com.microsoft QLinear operators;
    data movement and max pooling run on the integers; every other op runs in
    float between a DequantizeLinear and a QuantizeLinear, inserted only where
    a tensor is needed in the other form.

    Nodes in ``sg.higher`` compute in float (their outputs are still
    quantized where a quantized consumer reads them). With ``dynamic`` (a
    device whose Description lists "dynamic" activation quantization), the
    Gemms in ``sg.dynamic`` run as ai.nnhal DynamicQuantizeGemm: float in
    and out, each row quantized at run time with its own scale per
    ``sg.dynamic_block`` columns (weights per output channel and block; 0
    whole rows, None ``quantize.BLOCK``; NNHAL_DYNAMIC_BLOCK wins,
    ``quantize.dynamic_block``).

    ``conv_levels`` bounds the QLinearConv weights (group-1 convolutions, Gemm / MatMul as 1x1) to
    [-conv_levels, conv_levels]: a device whose integer GEMM runs 7-bit weights faster passes 64 (the cpu
    device on AVX2: vpmaddubsw, exact on them). DynamicQuantizeGemm weights keep 127 levels: 7-bit ones took
    MiniLM's cosine against fp32 below 0.999 (docs/int8.md).

    ``float_conv(node, graph)`` names the convolutions the device runs faster in float than on its integer
    kernels (the cpu device on AVX2: a shallow convolution of the float input image, ``cpu_device.float_conv``):
    they stay float Convs with their float32 weights, the Relu / Clip / SiLU that alone reads one with it, and
    a QuantizeLinear after where a quantized op reads them, as ``sg.higher`` nodes do.
    """
    from nnhal.optimizer.quantize import per_channel_int8

    g = subgraph_graph(sg)
    qdtype = QUANT_DTYPE[precision]
    consumers: dict[str, list[Node]] = {}
    for node in g.nodes:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    floats = {n for n in sg.inputs} | {n for n, t in g.tensors.items() if t.is_constant}
    twins: dict[str, str] = {}
    tabled: set[str] = set()        # float outputs of element-wise ops on codes (_on_codes) and of float_conv convs
    nodes: list[Node] = []
    skipped: set[str] = set()
    opset = sg.graph.opsets.get("", 17)

    def const(name: str, value: np.ndarray) -> str:
        g.tensors[name] = Tensor(name, np.asarray(value).dtype, tuple(np.shape(value)), TensorKind.CONSTANT,
                                 np.asarray(value))
        return name

    def params(name: str) -> tuple[str, str]:
        q = g.tensors[name].quant
        return (const(f"{name}::scale", np.asarray(q.scale, np.float32).reshape(())),
                const(f"{name}::zero", np.asarray(q.zero_point).astype(qdtype).reshape(())))

    def quantized(name: str) -> str:
        if name not in twins:
            twins[name] = f"{name}::q"
            g.tensors[twins[name]] = Tensor(twins[name])
            nodes.append(make_node(f"{name}::quantize", "QuantizeLinear", [name, *params(name)], [twins[name]], {},
                                   opset))
        return twins[name]

    def floated(name: str) -> str:
        if name not in floats:
            nodes.append(make_node(f"{name}::dequantize", "DequantizeLinear", [twins[name], *params(name)], [name],
                                   {}, opset))
            floats.add(name)
        return name

    def quantizable(name: str) -> bool:
        t = g.tensors[name]
        return t.dtype == F32 and t.quant is not None and not t.is_constant

    keep = set(sg.keep_fp32 | sg.higher)
    for node in g.nodes:
        if node.name in skipped:
            continue
        if dynamic and node.name in sg.dynamic and node.name not in keep:
            lowered_dynamic = _lower_dynamic(node, g, sg.dynamic_block)
            if lowered_dynamic is not None:
                x, wq, ws, bias, matrix, node_block = lowered_dynamic
                base = f"{node.name}::"
                ins = [floated(x), const(base + "w", wq), const(base + "w_scale", ws.astype(np.float32)),
                       "" if bias is None else const(base + "bias", bias.astype(np.float32))]
                columns = list(sg.dynamic[node.name])
                if columns:
                    ins.append(const(base + "w_float", np.ascontiguousarray(matrix[columns], np.float32)))
                nodes.append(make_node(node.name + "::dynamic", "DynamicQuantizeGemm", ins, [node.outputs[0]],
                                       {"activation": precision, "float_columns": columns, "block": node_block},
                                       opset, "ai.nnhal"))
                floats.add(node.outputs[0])
                continue
        floated_conv = float_conv is not None and node.op_type == "Conv" and not node.domain \
            and node.name not in keep and float_conv(node, g)
        if floated_conv:
            tail = _activation_tail(node, consumers)
            keep.update(tail)
            # its float output (after the activation) is quantized once for a following move, as an op's on codes
            tabled.add(node.outputs[0] if not tail else
                       next(n for n in g.nodes if n.name == tail[-1]).outputs[0])
        lowered = None if node.name in keep or floated_conv else \
            _lower_weighted(node, g, quantizable, per_channel_int8, conv_levels)
        if lowered is not None:
            x, weight, bias, attrs, reshape = lowered
            out = node.outputs[0]
            nxt = consumers.get(out, [])
            if out not in sg.outputs and len(nxt) == 1 and _absorbs(nxt[0], g, qdtype) \
                    and quantizable(nxt[0].outputs[0]):
                skipped.add(nxt[0].name)
                out = nxt[0].outputs[0]
            if not quantizable(out):
                lowered = None
        if lowered is not None:
            xs, xz = params(x)
            ys, yz = params(out)
            wq, ws = weight
            sx = float(np.asarray(g.tensors[x].quant.scale))
            bq = np.zeros(wq.shape[0], np.int32) if bias is None else \
                np.clip(np.rint(bias.astype(np.float64) / (sx * ws)), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
            base = f"{node.name}::"
            qx = quantized(x)
            if reshape is not None:
                qx4 = base + "x4"
                g.tensors[qx4] = Tensor(qx4)
                nodes.append(make_node(base + "to4d", "Reshape", [qx, const(base + "shape4", reshape[0])], [qx4], {},
                                       opset))
                qx = qx4
            qy = f"{out}::q"
            g.tensors[qy] = Tensor(qy)
            conv_out = qy if reshape is None else base + "y4"
            if reshape is not None:
                g.tensors[conv_out] = Tensor(conv_out)
            nodes.append(make_node(base + "qlinearconv", "QLinearConv",
                                   [qx, xs, xz, const(base + "w", wq), const(base + "w_scale", ws.astype(np.float32)),
                                    const(base + "w_zero", np.zeros(wq.shape[0], np.int8)), ys, yz,
                                    const(base + "bias", bq)], [conv_out], attrs, opset))
            if reshape is not None:
                nodes.append(make_node(base + "to2d", "Reshape", [conv_out, const(base + "shape2", reshape[1])], [qy],
                                       {}, opset))
            twins[out] = qy
            continue
        integer = _lower_integer(node, g, quantizable, floats, keep)
        if integer is not None:
            op, ins, attrs = integer
            out = node.outputs[0]
            operands = []
            for kind, name in ins:
                if kind == "q":
                    operands.append(quantized(name))
                else:
                    operands.extend(params(name))
            qy = f"{out}::q"
            g.tensors[qy] = Tensor(qy)
            nodes.append(make_node(node.name + "::" + op, op, operands, [qy], attrs, opset, "com.microsoft"))
            twins[out] = qy
            continue
        # NOTE: an input made in float by an element-wise op on codes (ResNet's stem: conv -> Relu -> MaxPool) is
        # quantized for the move: fuse_code_tables then makes DequantizeLinear -> Relu -> QuantizeLinear one lookup
        # (a clamp the conv's write-back takes), where the move would otherwise run in float between the two
        if _moves_codes(node, g) and node.name not in keep and quantizable(node.inputs[0]) \
                and (node.inputs[0] not in floats or node.inputs[0] in tabled):
            outs = []
            for out in node.outputs:
                if out:
                    g.tensors[out].quant = g.tensors[node.inputs[0]].quant     # same numbers, same parameters
                    twins[out] = f"{out}::q"
                    g.tensors[twins[out]] = Tensor(twins[out])
                outs.append(twins[out] if out else out)
            # NOTE: MaxPool takes 8-bit integers from opset 12 on (the schema check refuses an older node)
            version = max(node.version, INTEGER_SINCE.get(node.op_type, 0))
            nodes.append(replace(node, inputs=[quantized(node.inputs[0])] + node.inputs[1:], outputs=outs,
                                 version=version, opset=max(node.opset, version)))
            continue
        if _on_codes(node, g, twins):
            tabled.add(node.outputs[0])
        node.inputs = [floated(n) if n and n not in floats and n in twins else n for n in node.inputs]
        nodes.append(node)
        floats.update(o for o in node.outputs if o)
    for name in sg.outputs:
        floated(name)
    g.nodes = nodes
    infer_graph(g, fold=False, check_types=False)
    sg.graph, sg.nodes = g, nodes
    sg.precision = precision
    return sg


def _activation_tail(node: Node, consumers: dict[str, list[Node]]) -> list[str]:
    """The nodes of the activation that alone reads ``node``'s output (a Relu or Clip; a SiLU, Sigmoid and the
    Mul of the output by it), which a float convolution fuses: they stay float with it (one QuantizeLinear after
    the activation instead of quantized Sigmoid and Mul outputs and a QLinearMul)."""
    out = node.outputs[0]
    readers = consumers.get(out, [])
    if len(readers) == 1 and not readers[0].domain and readers[0].op_type in ("Relu", "Clip"):
        return [readers[0].name]
    if len(readers) != 2 or any(r.domain for r in readers):
        return []
    sig = [r for r in readers if r.op_type == "Sigmoid"]
    mul = [r for r in readers if r.op_type == "Mul"]
    if len(sig) == 1 and len(mul) == 1 and sorted(mul[0].inputs) == sorted([out, sig[0].outputs[0]]) \
            and [r.name for r in consumers.get(sig[0].outputs[0], [])] == [mul[0].name]:
        return [sig[0].name, mul[0].name]
    return []


def _on_codes(node: Node, g: Graph, twins: dict[str, str]) -> bool:
    """Whether ``node`` is an element-wise op (qtables.ELEMENTWISE, not a quantize or dequantize) of one quantized
    tensor and constant single values, with one output: fuse_code_tables turns it, between DequantizeLinear and
    QuantizeLinear, into one lookup on the codes."""
    if node.domain or ("", node.op_type) not in ELEMENTWISE or node.op_type in ("QuantizeLinear", "DequantizeLinear") \
            or not node.inputs or node.inputs[0] not in twins or len([o for o in node.outputs if o]) != 1:
        return False
    for name in node.inputs[1:]:
        t = g.tensors.get(name) if name else None
        if name and (t is None or not t.is_constant or t.value is None or np.size(t.value) != 1):
            return False
    return True


def _moves_codes(node: Node, g: Graph) -> bool:
    """Whether ``node`` gives the same numbers on the 8-bit codes as on their float values, so its outputs keep its
    input's quantization: MOVES with one output, a Split along constant sizes, and a nearest Resize (opset 11 on,
    whose schema takes 8-bit data; not tf_crop_and_resize) with constant roi, scales and sizes (a detector's
    upsampling neck: no DequantizeLinear / QuantizeLinear around them, and no second rounding of their outputs)."""
    if node.domain or not node.inputs or not node.inputs[0]:
        return False
    constant = all(not n or g.tensors[n].is_constant for n in node.inputs[1:])
    if node.op_type == "Split":
        return constant and any(node.outputs)
    if len([o for o in node.outputs if o]) != 1:
        return False
    if node.op_type == "Resize":
        # NOTE: not tf_crop_and_resize: its extrapolated pixels take extrapolation_value, a float that on the codes
        # would be read as a code
        return constant and node.version >= 11 and node.attrs.get("mode", "nearest") == "nearest" \
            and node.attrs.get("coordinate_transformation_mode") != "tf_crop_and_resize"
    return node.op_type in MOVES


def _lower_integer(node: Node, g: Graph, quantizable, floats: set[str], keep: set[str]):
    """(com.microsoft op, operands, attrs) for Add/Sum/Mul/Concat/pools whose tensors are all quantized.

    Operands are ("q", tensor) for a quantized tensor and ("p", tensor) for its scale and zero point.
    """
    if node.domain or node.name in keep or len([o for o in node.outputs if o]) != 1 or not node.outputs[0]:
        return None
    ins = [n for n in node.inputs if n]
    out = node.outputs[0]
    if not quantizable(out) or not ins or not all(quantizable(n) or (g.tensors[n].is_constant and
                                                                    g.tensors[n].quant is not None) for n in ins):
        return None
    op = node.op_type
    if op in ("Add", "Mul") or (op == "Sum" and len(ins) == 2):
        a, b = ins
        return ("QLinearMul" if op == "Mul" else "QLinearAdd"), [("q", a), ("p", a), ("q", b), ("p", b), ("p", out)], {}
    if op == "GlobalAveragePool" or _global_average(node, g):
        return "QLinearGlobalAveragePool", [("q", ins[0]), ("p", ins[0]), ("p", out)], {}
    if op == "AveragePool" and not node.attrs.get("dilations") and not node.attrs.get("ceil_mode", 0):
        attrs = {k: v for k, v in node.attrs.items() if v is not None and k != "dilations"}
        return "QLinearAveragePool", [("q", ins[0]), ("p", ins[0]), ("p", out)], attrs
    if op == "Concat":
        operands = [("p", out)]
        for n in ins:
            operands += [("q", n), ("p", n)]
        return "QLinearConcat", operands, {"axis": node.attrs["axis"]}
    return None


def _lower_dynamic(node: Node, g: Graph, preferred: int | None):
    """(x, int8 W [N, K], scales [N] or [N, K / block], bias or None, float W [N, K], block) of a
    Gemm(x, constant W, constant bias) with alpha = beta = 1."""
    from nnhal.optimizer.quantize import dynamic_block, per_block_int8

    if node.domain or node.op_type != "Gemm":
        return None
    a = node.attrs
    w = g.tensors[node.inputs[1]]
    if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or not w.is_constant \
            or w.value is None or w.value.ndim != 2 or g.tensors[node.inputs[0]].dtype != F32:
        return None
    matrix = w.value if a.get("transB", 0) else w.value.T
    bias = None
    if node.has_input(2):
        c = g.tensors[node.inputs[2]]
        if not c.is_constant or c.value.size not in (1, matrix.shape[0]):
            return None
        bias = np.broadcast_to(c.value.reshape(-1), (matrix.shape[0],))
    block = dynamic_block(matrix.shape[1], preferred)
    wq, ws = per_block_int8(matrix, block)
    return node.inputs[0], wq, ws, bias, matrix, block


def _global_average(node: Node, g: Graph) -> bool:
    """An AveragePool whose one window is the whole (static) image, unpadded (ResNet's 7x7 pool): the mean of
    every pixel, as GlobalAveragePool computes it (QLinearGlobalAveragePool: exact integer sums)."""
    if node.op_type != "AveragePool":
        return False
    shape = g.tensors[node.inputs[0]].shape
    a = node.attrs
    return shape is not None and all(isinstance(d, int) for d in shape) and len(shape) >= 3 \
        and list(a.get("kernel_shape") or []) == list(shape[2:]) and not any(a.get("pads") or []) \
        and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and not a.get("ceil_mode", 0) \
        and all(d == 1 for d in a.get("dilations") or [])


def _absorbs(node: Node, g: Graph, qdtype: np.dtype) -> bool:
    """Relu, or Clip with a constant lower bound of 0, whose output range starts exactly at 0:
    then saturating to the range does the clamp (asymmetric uint8; never symmetric int8)."""
    if node.domain or node.op_type not in ("Relu", "Clip"):
        return False
    q = g.tensors[node.outputs[0]].quant
    if q is None or (np.iinfo(qdtype).min - int(np.asarray(q.zero_point))) != 0:
        return False
    if node.op_type == "Relu":
        return True
    lo = g.tensors[node.inputs[1]].value if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("min")
    return lo is not None and float(np.asarray(lo)) == 0.0


def _lower_weighted(node: Node, g: Graph, quantizable, per_channel_int8, levels: int = 127):
    """(x, (wq, scales), bias, QLinearConv attrs, reshapes or None) for a quantizable Conv/Gemm/MatMul; the
    weights in [-levels, levels] (grouped convolutions: always 127)."""
    if node.domain or node.op_type not in ("Conv", "Gemm", "MatMul") or not quantizable(node.inputs[0]):
        return None
    w = g.tensors[node.inputs[1]]
    if not w.is_constant or w.dtype != F32:
        return None
    bias = None
    if node.op_type == "Conv":
        if node.has_input(2):
            if not g.tensors[node.inputs[2]].is_constant:
                return None
            bias = g.tensors[node.inputs[2]].value
        attrs = {k: v for k, v in node.attrs.items() if v is not None}
        # NOTE: the narrow weights serve a GEMM kernel; depthwise / grouped convolutions gain nothing from them
        narrow = levels if attrs.get("group", 1) == 1 and not _on_int8_grid(w.value) else 127
        return node.inputs[0], per_channel_int8(w.value, narrow), bias, attrs, None
    x = g.tensors[node.inputs[0]]
    if x.shape is None or len(x.shape) != 2 or w.value.ndim != 2:
        return None
    if node.op_type == "Gemm":
        a = node.attrs
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            return None
        matrix = w.value if a.get("transB", 0) else w.value.T
        if node.has_input(2):
            c = g.tensors[node.inputs[2]]
            if not c.is_constant or c.value.size not in (1, matrix.shape[0]):
                return None
            bias = np.broadcast_to(c.value.reshape(-1), (matrix.shape[0],))
    else:
        matrix = w.value.T
    m, k = matrix.shape
    shapes = (np.array([-1, k, 1, 1], np.int64), np.array([-1, m], np.int64))
    narrow = 127 if _on_int8_grid(matrix) else levels
    return node.inputs[0], per_channel_int8(matrix.reshape(m, k, 1, 1), narrow), bias, {}, shapes


def _on_int8_grid(w: np.ndarray) -> bool:
    """Whether the float weights are already int8 codes times a scale per output channel or per tensor whose
    peak code is 127 (a pre-quantized model's dequantized weights): re-quantizing them to 127 levels keeps them
    (or nearly, per tensor), to fewer would change the model's own weights."""
    flat = np.abs(w.reshape(w.shape[0], -1).astype(np.float64))
    for peak in (flat.max(axis=1, keepdims=True), flat.max(keepdims=True)):
        codes = flat * (127.0 / np.where(peak > 0, peak, 1.0))
        if np.all(np.abs(codes - np.rint(codes)) <= 1e-3):
            return True
    return False
