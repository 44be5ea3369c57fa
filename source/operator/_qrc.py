"""Shared inference aids of the quantization, recurrent and control-flow operators."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from nnhal.errors import ModelError, NnhalError, ShapeError, UnsupportedError, UnsupportedTypeError, where
from nnhal.graph.dtypes import to_numpy, type_name
from nnhal.graph.graph import Graph, free_names
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.operator.base import Info, Prototype, expect_shape, infer_body_graph
from nnhal.operator.op_matmul import matmul_shape as _matmul_shape

# ------------------------------------------------------------- quantization
QUANT_RANGES: dict[np.dtype, tuple[int, int]] = {
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int16): (-32768, 32767),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int32): (-2 ** 31, 2 ** 31 - 1),
}
EIGHT_BIT = (np.dtype(np.int8), np.dtype(np.uint8))


def check_quant_dtype(node: Node, dtype: np.dtype | None, what: str,
                      allowed: tuple[np.dtype, ...] = tuple(QUANT_RANGES)) -> None:
    """UnsupportedTypeError unless ``dtype`` (when known) is one of ``allowed``."""
    if dtype is not None and np.dtype(dtype) not in allowed:
        raise UnsupportedTypeError(f"{where(node)}: {what} has element type {np.dtype(dtype)}; "
                                   f"nnhal supports {[str(d) for d in allowed]} here")


def onnx_dtype(node: Node, code: int, what: str) -> np.dtype:
    """The numpy dtype of an ONNX element type attribute; UnsupportedTypeError if none."""
    dtype = to_numpy(code)
    if dtype is None:
        raise UnsupportedTypeError(f"{where(node)}: {what} is {type_name(code)}, which nnhal does not support")
    return dtype


def check_quant_params(node: Node, x: Info, scale: Info, zero: Info | None, axis: int, block: int) -> None:
    """Validate the scale / zero-point shapes against per-tensor, per-axis or blocked granularity."""
    # NOTE: a one-element scale with a scalar zero point (or the reverse) is per-tensor either way;
    # quantization tools write both forms.
    if zero is not None and zero.shape is not None and scale.shape is not None and zero.shape != scale.shape \
            and not (np.prod(zero.shape) == 1 and np.prod(scale.shape) == 1):
        raise ShapeError(f"{where(node)}: scale shape {scale.shape} and zero point shape {zero.shape} differ")
    if scale.shape is None or x.shape is None:
        return
    rank = len(x.shape)
    s = scale.shape
    if block > 0:
        if len(s) != rank:
            raise ShapeError(f"{where(node)}: blocked quantization needs a scale of rank {rank}, got {s}")
        ax = quant_axis(node, axis, rank)
        for i, (d, sd) in enumerate(zip(x.shape, s)):
            if d is None or sd is None:
                continue
            want = -(-d // block) if i == ax else d
            if sd != want:
                raise ShapeError(f"{where(node)}: scale shape {s} does not block input shape {x.shape} "
                                 f"with block_size {block} on axis {ax}")
        return
    if len(s) == 0 or (len(s) == 1 and s[0] == 1):
        return
    if len(s) != 1:
        raise ShapeError(f"{where(node)}: scale must be a scalar or 1-D tensor without block_size, got shape {s}")
    ax = quant_axis(node, axis, rank)
    if x.shape[ax] is not None and s[0] is not None and x.shape[ax] != s[0]:
        raise ShapeError(f"{where(node)}: scale has {s[0]} values; axis {ax} of input {x.shape} has {x.shape[ax]}")


def quant_axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{where(node)}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def matmul_shape(node: Node, a: tuple | None, b: tuple | None) -> tuple | None:
    """numpy.matmul output shape (batch dims broadcast); None when unknown. MatMul's own rule."""
    from nnhal.operator.table import get_prototype

    return _matmul_shape(get_prototype("", "MatMul"), node, a, b)


def per_tensor_or_axis(proto: Prototype, node: Node, info: Info, what: str, length: int | None) -> None:
    """ShapeError unless a quantization parameter holds one element, or is 1-D with ``length`` values."""
    shape = info.shape
    if shape is None or any(d is None for d in shape) or int(np.prod(shape, dtype=np.int64)) == 1:
        return
    if len(shape) != 1 or (length is not None and shape[0] != length) or length == 1:
        per_row = length if length is not None else "one per row/column"
        want = "one element" if length == 1 else f"one element or {per_row}"
        raise proto.fail(node, f"{what} has shape {shape}; it must hold {want}")


CONV_ATTRIBUTES = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                   "pads": None, "strides": None}


def conv_shape(node: Node, x: Info, w: Info) -> tuple | None:
    """Output shape of a convolution node (Conv attributes) for input x and weight w."""
    from nnhal.operator.table import get_prototype

    conv = get_prototype("", "Conv")
    return conv.infer(node, [Info(x.dtype, x.shape), Info(w.dtype, w.shape)])[0].shape


# ---------------------------------------------------------------- recurrent
RNN_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
                   "HardSigmoid", "Elu", "Softsign", "Softplus")


class RecurrentPrototype(Prototype):
    """RNN, GRU and LSTM: X (T, B, I) or (B, T, I) -> Y, Y_h (and Y_c)."""

    gates: int = 1
    default_activations: tuple[str, ...] = ("Tanh",)
    extra_attributes: dict[str, Any] = {}

    def attributes_for(self, version: int) -> dict[str, Any]:
        attrs = {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
                 "direction": "forward", "hidden_size": None, **self.extra_attributes}
        if version >= 14:
            attrs["layout"] = 0
        if version == 1:
            attrs["output_sequence"] = 0
        return attrs

    def directions(self, node: Node) -> int:
        return 2 if node.attrs["direction"] == "bidirectional" else 1

    def check(self, node: Node) -> None:
        direction = node.attrs["direction"]
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ModelError(f"{where(node)}: direction '{direction}' is not forward, reverse or bidirectional")
        acts = node.attrs["activations"]
        if acts is not None:
            per = len(self.default_activations)
            if len(acts) not in (per, per * self.directions(node)):
                raise ModelError(f"{where(node)}: {len(acts)} activations given; expected {per} per direction")
            for a in acts:
                if a.lower() not in {x.lower() for x in RNN_ACTIVATIONS}:
                    raise ModelError(f"{where(node)}: activation '{a}' is not one of {list(RNN_ACTIVATIONS)}")
        if node.attrs.get("layout", 0) not in (0, 1):
            raise ModelError(f"{where(node)}: layout must be 0 or 1, got {node.attrs['layout']}")

    def hidden(self, node: Node, ins: list[Info | None]) -> int | None:
        if node.attrs["hidden_size"] is not None:
            return int(node.attrs["hidden_size"])
        r = ins[2]
        if r is not None and r.shape is not None and len(r.shape) == 3:
            return r.shape[2]
        return None

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        for name, i in (("X", 0), ("W", 1), ("R", 2)):
            info = ins[i]
            if info.shape is not None and len(info.shape) != 3:
                raise self.fail(node, f"{name} must have rank 3, got shape {info.shape}")
        if x.dtype is not None and x.dtype.kind != "f":
            raise self.fail(node, f"X must be a float tensor, got {x.dtype}")
        d = self.directions(node)
        h = self.hidden(node, ins)
        w = ins[1]
        if w.shape is not None and w.shape[0] is not None and w.shape[0] != d:
            raise self.fail(node, f"W has {w.shape[0]} directions; direction '{node.attrs['direction']}' needs {d}")
        if h is not None and w.shape is not None and w.shape[1] is not None and w.shape[1] != self.gates * h:
            raise self.fail(node, f"W has {w.shape[1]} rows; expected {self.gates} x hidden_size {h}")
        size = None if x.shape is None else x.shape[2]
        expect_shape(node, w, (d, None if h is None else self.gates * h, size), "W")
        expect_shape(node, ins[2], (d, None if h is None else self.gates * h, h), "R")
        bias = ins[3] if len(ins) > 3 else None
        expect_shape(node, bias, (d, None if h is None else 2 * self.gates * h), "B")
        if x.shape is None:
            t = b = None
        elif node.attrs.get("layout", 0) == 1:
            b, t = x.shape[0], x.shape[1]
        else:
            t, b = x.shape[0], x.shape[1]
        if node.attrs.get("layout", 0) == 1:
            y, yh = (b, t, d, h), (b, d, h)
        else:
            y, yh = (t, d, b, h), (d, b, h)
        for i, what in ((5, "initial_h"), (6, "initial_c")):
            if i < len(ins) and (i == 5 or self.gates == 4):
                expect_shape(node, ins[i], yh, what)
        outs = [Info(x.dtype, y), Info(x.dtype, yh), Info(x.dtype, yh)]
        return outs[:len(node.outputs)]


# ------------------------------------------------------------- control flow
def implicit_infos(node: Node, ins: list[Info | None]) -> dict[str, Info]:
    """Infos of the node's implicit inputs when the caller passed them after the explicit ones."""
    extra = ins[len(node.inputs):]
    return {name: info for name, info in zip(node.implicit_inputs, extra) if info is not None}


def infer_body(body: Graph, inputs: list[Info | None], outer: dict[str, Info]) -> list[Info]:
    """Output infos of a body graph for given input infos (None = keep the declared type).

    Outer-scope tensors the body reads are typed from ``outer`` (constants when
    their value is known); inference failures give unknown outputs.
    """
    graph = body.copy()
    for name, info in zip(graph.inputs, inputs):
        t = graph.tensors[name]
        if info is not None and info.dtype is not None:
            t.dtype = info.dtype
            t.shape = info.shape
    for name in free_names(body):
        info = outer.get(name)
        t = Tensor(name, kind=TensorKind.INPUT)
        if info is not None:
            t.dtype, t.shape = info.dtype, info.shape
            if info.value is not None:
                t = replace(t, kind=TensorKind.CONSTANT, value=np.asarray(info.value))
        elif name in graph.tensors:
            old = graph.tensors[name]
            t.dtype, t.shape = old.dtype, old.shape
        graph.tensors[name] = t
    try:
        infer_body_graph(graph)
    except NnhalError:
        # NOTE: a body whose outer-scope types are unknown may not infer; its
        # outputs are then known only at run time.
        return [Info(None, None) for _ in body.outputs]
    result = []
    for name in graph.outputs:
        t = graph.tensors.get(name)
        if t is None:
            result.append(Info(None, None))
        else:
            result.append(Info(t.dtype, t.shape, t.value if t.is_constant else None))
    return result


def require_dtypes(node: Node, outs: list[Info]) -> list[Info]:
    """``outs`` unchanged; UnsupportedError when the element type of a used output is unknown.

    Kernels need element types; a body output's type stays unknown when it
    depends on outer-scope tensors whose types inference was not given.
    """
    for name, info in zip(node.outputs, outs):
        if name and info.dtype is None:
            raise UnsupportedError(
                f"{where(node)}: the element type of output '{name}' depends on outer-scope tensors "
                f"{node.implicit_inputs} whose types shape inference does not pass to control-flow nodes")
    return outs


def merge_shapes(a: tuple | None, b: tuple | None) -> tuple | None:
    """The most specific shape covering both: None dims where they differ."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def merge_info(a: Info, b: Info) -> Info:
    dtype = a.dtype if a.dtype is not None else b.dtype
    return Info(dtype, merge_shapes(a.shape, b.shape))


def without_value(info: Info) -> Info:
    return Info(info.dtype, info.shape)


def body_attr(node: Node, name: str) -> Graph:
    body = node.attrs.get(name)
    if not isinstance(body, Graph):
        raise ModelError(f"{where(node)}: attribute '{name}' must be a graph")
    return body


def carried_fixpoint(body: Graph, head: list[Info], state: list[Info], rest: list[Info | None],
                     outer: dict[str, Info], n_head_out: int, rounds: int = 4) -> tuple[list[Info], list[Info]]:
    """Loop-carried state infos stable across iterations, and the body output infos for them.

    The body takes ``head + state + rest`` and returns ``n_head_out`` leading
    outputs, then the next state, then the rest.
    """
    state = [without_value(s) for s in state]
    outs = infer_body(body, head + state + rest, outer)
    for _ in range(rounds):
        nxt = outs[n_head_out:n_head_out + len(state)]
        merged = [merge_info(s, o) for s, o in zip(state, nxt)]
        if merged == state:
            return state, outs
        state = merged
        outs = infer_body(body, head + state + rest, outer)
    state = [Info(s.dtype, None) for s in state]
    return state, infer_body(body, head + state + rest, outer)

