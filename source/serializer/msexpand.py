"""Expand the com.microsoft float operators onnxruntime's optimizer writes into standard ONNX operators.

A model saved by onnxruntime after optimization (``SessionOptions.optimized_model_filepath`` at
ORT_ENABLE_EXTENDED, or onnxruntime.transformers' optimizer) holds onnxruntime's fused float operators:
FusedConv, FusedGemm, FusedMatMul, SkipLayerNormalization, SkipSimplifiedLayerNormalization, Gelu, BiasGelu,
FastGelu, QuickGelu, BiasAdd, EmbedLayerNormalization, and LayerNormalization / SimplifiedLayerNormalization
(onnxruntime declares both in the ONNX domain below opset 17, and in com.microsoft). Each is rewritten at
import, for every device, into the standard operators with exactly its semantics (Conv + activation, MatMul +
scale, Add + LayerNormalization, Gelu, ...), so that a device's own fusions (a conv's activation epilogue, a
MatMul's bias/scale/Gelu epilogue, the LayerNormalization kernel) take them as they take an unoptimized export.
A node whose semantics the standard operators cannot reproduce exactly raises UnsupportedOperatorError naming
node, op, domain and attribute.

The expansion works on NodeProtos: ``expand`` turns one node into ``(NodeProto, opset)`` pairs that the
importer converts as it converts the model's own nodes (each with the opset given, which may be above the
model's: LayerNormalization needs 17, Gelu 20, RMSNormalization 23).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from nnhal.errors import UnsupportedOperatorError

MS = "com.microsoft"

# the float ops expanded here, by domain ("" is onnxruntime's own LayerNormalization of the ONNX domain
# below opset 17 and its SimplifiedLayerNormalization, which ONNX never declared)
MS_OPS = frozenset({"FusedConv", "FusedGemm", "FusedMatMul", "SkipLayerNormalization",
                    "SkipSimplifiedLayerNormalization", "Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasAdd",
                    "LayerNormalization", "SimplifiedLayerNormalization", "EmbedLayerNormalization"})

# the lowest opset each emitted operator is written at (the node's opset is the larger of this and the
# model's): Clip reads its bounds as inputs from 11 on, Gelu exists from 20, RMSNormalization from 23
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)
_MIN_OPSET = {"LayerNormalization": 17, "Gelu": 20, "RMSNormalization": 23, "Clip": 13, "CastLike": 15, "Shape": 15,
              "Slice": 13, "ReduceSum": 13}


def expandable(domain: str, op_type: str, opset: int | None) -> bool:
    """Whether a node of ``domain``::``op_type`` at ``opset`` is one ``expand`` rewrites."""
    if domain == MS:
        return op_type in MS_OPS
    if domain == "":
        return op_type == "SimplifiedLayerNormalization" or (op_type == "LayerNormalization"
                                                             and (opset or 0) < 17)
    return False


class _Writer:
    """Collects the standard nodes one com.microsoft node expands into."""

    def __init__(self, node: onnx.NodeProto, name: str, onnx_opset: int, src_opset: int, dtypes: dict[str, int],
                 ranks: dict[str, int]) -> None:
        self.src, self.name, self.onnx_opset = node, name, onnx_opset
        self.src_opset = src_opset
        self.dtypes, self.ranks = dtypes, ranks
        self.out: list[tuple[onnx.NodeProto, int]] = []
        self.k = 0

    def fresh(self) -> str:
        self.k += 1
        return f"{self.name}__ms{self.k}"

    def node(self, op: str, inputs: list[str], outputs: list[str] | None = None, **attrs) -> str:
        """Append ``op``; return its first output (a fresh name unless ``outputs`` gives it)."""
        outputs = outputs or [self.fresh()]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        proto = helper.make_node(op, inputs, outputs, name=f"{self.name}/{op}_{len(self.out)}", **attrs)
        self.out.append((proto, max(self.onnx_opset, _MIN_OPSET.get(op, 1))))
        return outputs[0]

    def scalar(self, value: float, like: str) -> str:
        """A scalar constant of ``like``'s element type (a CastLike of a float32 one when the model does
        not record that type)."""
        # NOTE: every op expanded here computes in its first input's type: that type serves for an intermediate
        elem = self.dtypes.get(like) or self.dtypes.get(self.src.input[0])
        if elem is not None and elem not in _FLOATS:
            raise self.fail(f"'{like}' is {TensorProto.DataType.Name(elem)}; the expansion is for float tensors")
        if elem is not None:
            dtype = helper.tensor_dtype_to_np_dtype(elem) if elem != TensorProto.BFLOAT16 else np.float32
            tensor = numpy_helper.from_array(np.array(value, dtype=dtype), self.fresh())
            if elem == TensorProto.BFLOAT16:
                tensor = helper.make_tensor(tensor.name, elem, [], [value])
            return self.node("Constant", [], value=tensor)
        c = self.node("Constant", [], value=numpy_helper.from_array(np.array(value, np.float32), self.fresh()))
        return self.node("CastLike", [c, like])

    def fail(self, what: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(
            f"node '{self.name}' ({self.src.domain or 'ai.onnx'}::{self.src.op_type}, opset "
            f"{self.src_opset}, the import's device-independent expansion): {what}",
            [(f"{self.src.domain + '::' if self.src.domain else ''}{self.src.op_type}", self.src_opset, self.name)])


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if i < len(node.input) else ""


def _output(node: onnx.NodeProto, i: int, used: set[str]) -> str:
    """Output ``i`` when something reads it (a node or a graph output), else ''."""
    name = node.output[i] if i < len(node.output) else ""
    return name if name and name in used else ""


def _activation(w: _Writer, x: str, act: str, params: dict[str, float | None], out: str) -> None:
    """``out`` = ``act``(``x``) with ``params`` (alpha, beta, gamma; None: the standard default)."""
    alpha, beta, gamma = params.get("alpha"), params.get("beta"), params.get("gamma")
    if act in ("Relu", "Tanh", "Sigmoid", "Softsign", "Softplus"):
        w.node(act, [x], [out])
    elif act in ("LeakyRelu", "Elu", "ThresholdedRelu"):
        w.node(act, [x], [out], alpha=alpha)
    elif act == "HardSigmoid":
        w.node(act, [x], [out], alpha=alpha, beta=beta)
    elif act == "Selu":
        w.node(act, [x], [out], alpha=alpha, gamma=gamma)
    elif act == "Clip":
        if alpha is None or beta is None:
            raise w.fail("a Clip activation needs activation_params (min, max)")
        w.node("Clip", [x, w.scalar(alpha, x), w.scalar(beta, x)], [out])
    else:
        raise w.fail(f"attribute 'activation' = '{act}' has no standard-operator expansion")


def _fused_conv(w: _Writer, n: onnx.NodeProto, a: dict) -> None:
    act = _text(a.pop("activation", "Identity"))
    params = [float(p) for p in a.pop("activation_params", [])]
    want = {"LeakyRelu": 1, "Clip": 2, "HardSigmoid": 2}.get(act, 0)
    if len(params) != want and not (act == "LeakyRelu" and not params):
        raise w.fail(f"attribute 'activation_params' has {len(params)} values; {act} takes {want}")
    conv_attrs = {k: v for k, v in a.items() if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                                        "strides")}
    if len(conv_attrs) != len(a):
        raise w.fail(f"attribute(s) {sorted(set(a) - set(conv_attrs))} are not Conv attributes")
    y = n.output[0]
    z = _input(n, 3)
    last = act == "Identity" and not z
    ins = list(n.input[:3])
    while ins and not ins[-1]:
        ins.pop()
    conv_attrs = {k: _text(v) if k == "auto_pad" else v for k, v in conv_attrs.items()}
    conv = w.node("Conv", ins, [y] if last else None, **conv_attrs)
    if z:
        conv = w.node("Add", [conv, z], [y] if act == "Identity" else None)
    if act != "Identity":
        keys = {"LeakyRelu": ("alpha",), "Clip": ("alpha", "beta"), "HardSigmoid": ("alpha", "beta")}.get(act, ())
        _activation(w, conv, act, dict(zip(keys, params, strict=False)), y)


def _fused_gemm(w: _Writer, n: onnx.NodeProto, a: dict) -> None:
    act = _text(a.pop("activation", "Identity"))
    params = {"alpha": a.pop("activation_alpha", None), "beta": a.pop("activation_beta", None),
              "gamma": a.pop("activation_gamma", None)}
    leaky = a.pop("leaky_relu_alpha", None)
    if act == "LeakyRelu" and params["alpha"] is None:
        params["alpha"] = leaky
    gemm_attrs = {k: v for k, v in a.items() if k in ("alpha", "beta", "transA", "transB")}
    if len(gemm_attrs) != len(a):
        raise w.fail(f"attribute(s) {sorted(set(a) - set(gemm_attrs))} are not Gemm attributes")
    y = n.output[0]
    g = w.node("Gemm", list(n.input), [y] if act == "Identity" else None, **gemm_attrs)
    if act != "Identity":
        _activation(w, g, act, params, y)


def _operand(w: _Writer, x: str, side: str, trans: bool, trans_batch: bool) -> str:
    """FusedMatMul's operand ``side`` (A or B) as MatMul reads it: with ``trans_batch`` its first axis moves
    to the second-to-last place (the batch axes 1 .. rank-2 lead), with ``trans`` the last two swap."""
    if not trans and not trans_batch:
        return x
    rank = w.ranks.get(x)
    what = f"transBatch{side}" if trans_batch else f"trans{side}"
    if rank is None:
        raise w.fail(f"attribute '{what}' = 1 on '{x}', whose rank the model does not record")
    if rank < 2 or (trans_batch and rank < 3):
        if trans_batch:
            raise w.fail(f"attribute 'transBatch{side}' = 1 on '{x}' of rank {rank} (it needs rank 3 or more)")
        return x
    perm = list(range(1, rank - 1)) + [0, rank - 1] if trans_batch else list(range(rank))
    if trans:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    return w.node("Transpose", [x], perm=perm)


def _fused_matmul(w: _Writer, n: onnx.NodeProto, a: dict) -> None:
    left = _operand(w, n.input[0], "A", bool(a.get("transA", 0)), bool(a.get("transBatchA", 0)))
    right = _operand(w, n.input[1], "B", bool(a.get("transB", 0)), bool(a.get("transBatchB", 0)))
    alpha = float(a.get("alpha", 1.0))
    y = n.output[0]
    # NOTE: the scale as a Mul after the product (not folded into a weight): the cpu device's MatMul runs it
    # as a scale epilogue, in place
    prod = w.node("MatMul", [left, right], [y] if alpha == 1.0 else None)
    if alpha != 1.0:
        w.node("Mul", [prod, w.scalar(alpha, prod)], [y])


def _skip_sum(w: _Writer, n: onnx.NodeProto, bias_index: int, used: set[str], sum_index: int) -> str:
    """input + skip (+ bias), in onnxruntime's order; written to the node's sum output when that is read."""
    total = _output(n, sum_index, used)
    bias = _input(n, bias_index)
    s = w.node("Add", [n.input[0], n.input[1]], [total] if total and not bias else None)
    if bias:
        s = w.node("Add", [s, bias], [total] if total else None)
    return s


def _embed_layer_normalization(w: _Writer, n: onnx.NodeProto, a: dict, used: set[str]) -> None:
    """LayerNormalization(word[ids] + position[position_ids, or 0 .. S-1] (+ segment[segment_ids])), the sum
    in onnxruntime's order; ``embedding_sum`` the sum, ``mask_index`` the count of ones per row of the mask."""
    ids, seg_ids, word, pos, seg = (_input(n, i) for i in range(5))
    gamma, beta, mask, pos_ids = _input(n, 5), _input(n, 6), _input(n, 7), _input(n, 8)
    total = w.node("Gather", [word, ids], axis=0)
    if pos_ids:
        positions = w.node("Gather", [pos, pos_ids], axis=0)
    else:
        length = w.node("Shape", [ids], start=1, end=2)
        zero = w.node("Constant", [], value=numpy_helper.from_array(np.zeros(1, np.int64), w.fresh()))
        positions = w.node("Slice", [pos, zero, length, zero])
    summed = _output(n, 2, used)
    has_seg = bool(seg_ids and seg)
    total = w.node("Add", [total, positions], [summed] if summed and not has_seg else None)
    if has_seg:
        total = w.node("Add", [total, w.node("Gather", [seg, seg_ids], axis=0)], [summed] if summed else None)
    if n.output[0]:
        w.node("LayerNormalization", [total, gamma, beta], [n.output[0]], axis=-1, epsilon=a.get("epsilon"))
    if _output(n, 1, used):
        if not mask or a.get("mask_index_type", 1) != 1:
            raise w.fail(f"output 1 ('{n.output[1]}', mask_index) is read without a mask or with mask_index_type "
                         f"{a.get('mask_index_type', 1)}; it is not expanded")
        ones = w.node("Cast", [w.node("Equal", [mask, w.node("Constant", [], value=helper.make_tensor(
            w.fresh(), TensorProto.INT32, [], [1]))])], to=TensorProto.INT32)
        axis = w.node("Constant", [], value=numpy_helper.from_array(np.array([1], np.int64), w.fresh()))
        w.node("ReduceSum", [ones, axis], [n.output[1]], keepdims=0)


def _norm_attrs(a: dict, w: _Writer, allowed: Iterable[str]) -> dict:
    extra = sorted(set(a) - set(allowed))
    if extra:
        raise w.fail(f"attribute(s) {extra} are not expanded")
    return a


def expand(node: onnx.NodeProto, name: str, opsets: dict[str, int], used: set[str], dtypes: dict[str, int],
           ranks: dict[str, int]) -> list[tuple[onnx.NodeProto, int]]:
    """The standard nodes, each with the ONNX-domain opset it is written at, that compute ``node`` (one
    ``expandable`` names). ``used``: the names some node or graph output reads (an optional extra output
    nothing reads is dropped); ``dtypes`` / ``ranks``: element type and rank of the tensors whose types the
    model records (value_info, inputs, initializers)."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    w = _Writer(node, name, opsets.get("", 17), opsets.get(domain, 1), dtypes, ranks)
    a = _attrs(node)
    op = node.op_type
    if op == "FusedConv":
        _fused_conv(w, node, a)
    elif op == "FusedGemm":
        _fused_gemm(w, node, a)
    elif op == "FusedMatMul":
        _fused_matmul(w, node, a)
    elif op in ("Gelu", "BiasGelu", "FastGelu"):
        _norm_attrs(a, w, ())
        x = node.input[0]
        if _input(node, 1):
            x = w.node("Add", [x, node.input[1]])
        w.node("Gelu", [x], [node.output[0]], approximate="tanh" if op == "FastGelu" else None)
    elif op == "QuickGelu":
        _norm_attrs(a, w, ("alpha",))
        x = node.input[0]
        alpha = float(a.get("alpha", 1.702))
        # NOTE: Sigmoid(x) -> Mul(x, .) for alpha 1, torch's SiLU, which the cpu device fuses into a producer
        scaled = x if alpha == 1.0 else w.node("Mul", [x, w.scalar(alpha, x)])
        w.node("Mul", [x, w.node("Sigmoid", [scaled])], [node.output[0]])
    elif op == "BiasAdd":
        _norm_attrs(a, w, ())
        w.node("Add", [w.node("Add", [node.input[0], node.input[1]]), node.input[2]], [node.output[0]])
    elif op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"):
        simplified = op == "SkipSimplifiedLayerNormalization"
        _norm_attrs(a, w, ("epsilon",))
        # outputs: output, mean, inv_std_var, input_skip_bias_sum (the simplified form: no mean)
        stats = (2,) if simplified else (1, 2)
        for i in stats:
            if _output(node, i, used):
                raise w.fail(f"output {i} ('{node.output[i]}', a training statistic) is read; it is not expanded")
        s = _skip_sum(w, node, 3 if simplified else 4, used, 3)
        eps = a.get("epsilon")
        if not node.output[0]:
            pass            # only the sum is read
        elif simplified:
            w.node("RMSNormalization", [s, node.input[2]], [node.output[0]], axis=-1, epsilon=eps)
        else:
            w.node("LayerNormalization", [s, node.input[2], _input(node, 3)], [node.output[0]], axis=-1,
                   epsilon=eps)
    elif op == "EmbedLayerNormalization":
        _embed_layer_normalization(w, node, _norm_attrs(a, w, ("epsilon", "mask_index_type")), used)
    elif op == "LayerNormalization":
        a = _norm_attrs(a, w, ("axis", "epsilon", "stash_type"))
        outs = [node.output[0]] + [_output(node, i, used) for i in (1, 2)]
        while outs[-1] == "":
            outs.pop()
        w.node("LayerNormalization", [i for i in node.input[:3]], outs, **a)
    elif op == "SimplifiedLayerNormalization":
        a = _norm_attrs(a, w, ("axis", "epsilon", "stash_type"))
        if _output(node, 1, used):
            raise w.fail(f"output 1 ('{node.output[1]}', inv_std_var) is read; it is not expanded")
        w.node("RMSNormalization", list(node.input[:2]), [node.output[0]], **a)
    else:
        raise w.fail("no expansion")
    return w.out


def graph_types(gp: onnx.GraphProto) -> tuple[dict[str, int], dict[str, int]]:
    """Element type and rank of every tensor of ``gp`` whose type the model records."""
    dtypes: dict[str, int] = {}
    ranks: dict[str, int] = {}
    for vi in list(gp.input) + list(gp.value_info) + list(gp.output):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type"):
            if t.elem_type:
                dtypes[vi.name] = t.elem_type
            if t.HasField("shape"):
                ranks[vi.name] = len(t.shape.dim)
    for init in gp.initializer:
        dtypes[init.name] = init.data_type
        ranks[init.name] = len(init.dims)
    _propagate_dtypes(gp, dtypes)
    return dtypes, ranks


_INT64_OUT = frozenset({"Shape", "Size", "NonZero", "ArgMax", "ArgMin", "NonMaxSuppression"})
_BOOL_OUT = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
                       "IsNaN", "IsInf"})


def _propagate_dtypes(gp: onnx.GraphProto, dtypes: dict[str, int]) -> None:
    """Fill in the element type of node outputs the model does not record: an output takes the type of
    its node's first typed data input, except the ops whose output type is fixed or an attribute.
    NOTE: only ever used for the type of a scalar constant the expansion writes; a wrong guess makes the
    expanded node's inputs disagree in type, which inference refuses, never a silent change of result."""
    for n in gp.node:
        if not n.output or n.output[0] in dtypes:
            continue
        a = {x.name: x for x in n.attribute}
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        if op == "Cast" and "to" in a:
            elem = a["to"].i
        elif op == "Constant" and "value" in a:
            elem = a["value"].t.data_type
        elif op in _INT64_OUT:
            elem = TensorProto.INT64
        elif op in _BOOL_OUT:
            elem = TensorProto.BOOL
        elif op in ("Where", "CastLike"):
            elem = dtypes.get(_input(n, 1))
        elif op in ("DequantizeLinear", "QuantizeLinear", "ConstantOfShape", "Range", "EyeLike", "If", "Loop",
                    "Scan", "RandomNormalLike", "RandomUniformLike", "Multinomial") \
                or (n.domain not in ("", "ai.onnx") and not (n.domain == MS and n.op_type in MS_OPS)):
            elem = None
        else:
            elem = next((dtypes[i] for i in n.input if i and i in dtypes), None)
        if elem:
            dtypes[n.output[0]] = elem


def read_names(gp: onnx.GraphProto) -> set[str]:
    """Every name a node of ``gp`` or of a nested graph reads, and ``gp``'s outputs."""
    names = {o.name for o in gp.output}
    for n in gp.node:
        names.update(n.input)
        for attr in n.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                names |= read_names(g)
    return names
