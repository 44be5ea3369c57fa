"""onnxruntime's fused com.microsoft float operators (FusedConv, FusedGemm, FusedMatMul, SkipLayerNormalization,
Gelu, ...) load and run as standard operators (nnhal.serializer.msexpand): each hand-built node against
onnxruntime running that node, the attributes it cannot expand exactly refused by name, and models saved by
onnxruntime's optimizer against onnxruntime on the original export, with the cpu device's fusions taking the
expanded nodes as they take the original ones."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import gamma, matmul_bound
from nnhal.errors import UnsupportedOperatorError
from tests.serializer import ms_models

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
U = float(np.finfo(np.float32).eps) / 2
# NOTE: two libm-level evaluations of one smooth elementwise function (erf, tanh, exp) in float32, each within
# a few ulps, plus the rounding of the few float ops around it: 16 u relative to max(|y|, 1)
ELEMENTWISE = 16 * U


def _model(nodes, inputs, outputs, inits=(), opset=17, value_info=()):
    graph = helper.make_graph(nodes, "ms", inputs, outputs, list(inits), value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _both(model, feeds):
    """(nnhal's outputs, onnxruntime's outputs) of ``model``."""
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    with nnhal.Session(data, devices=["cpu"]) as s:
        got = s.run(feeds)
    return got, want


def _close(got, want, bound):
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    assert got.shape == want.shape and got.dtype == np.float32
    excess = diff - np.broadcast_to(bound, diff.shape)
    assert np.all(excess <= 0), f"max excess {excess.max():.3g}, max diff {diff.max():.3g}"


def _rng(seed=0):
    return np.random.default_rng(seed)


# ------------------------------------------------------------------ FusedConv
CONV_ACTS = [("Relu", []), ("Sigmoid", []), ("Tanh", []), ("LeakyRelu", [0.13]), ("Clip", [-0.4, 0.7]),
             ("HardSigmoid", [0.25, 0.4]), ("Identity", [])]


@pytest.mark.parametrize("act,params", CONV_ACTS)
@pytest.mark.parametrize("bias,z", [(True, False), (False, False), (True, True)])
def test_fused_conv(act, params, bias, z):
    rng = _rng()
    x = rng.standard_normal((2, 6, 9, 7)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    attrs = dict(group=2, kernel_shape=[3, 2], pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2])
    if act != "Identity":
        attrs["activation"] = act
    if params:
        attrs["activation_params"] = params
    out_shape = [2, 4, 5, 6]
    zv = rng.standard_normal(out_shape).astype(np.float32)
    ins = ["x", "w", "b" if bias else "", "z" if z else ""]
    while not ins[-1]:
        ins.pop()
    node = helper.make_node("FusedConv", ins, ["y"], domain=MS, **attrs)
    inputs = [_vi("x", x.shape)] + ([_vi("z", out_shape)] if z else [])
    model = _model([node], inputs, [_vi("y", out_shape)],
                   [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    feeds = {"x": x, "z": zv} if z else {"x": x}
    (got,), (want,) = _both(model, feeds)
    k = 3 * 3 * 2
    # the conv's k products and its bias and residual: reduction_bound over max magnitudes (activation slopes <= 1)
    magnitude = k * np.abs(x).max() * np.abs(w).max() + np.abs(b).max() + (np.abs(zv).max() if z else 0)
    _close(got, want, 2 * gamma(k + 3) * magnitude + ELEMENTWISE * np.maximum(np.abs(want), 1))


def test_fused_conv_unknown_activation_names_node_and_attribute():
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], name="c0", domain=MS, activation="Gelu",
                            kernel_shape=[1, 1])
    w = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w")
    model = _model([node], [_vi("x", [1, 2, 3, 3])], [_vi("y", [1, 2, 3, 3])], [w])
    with pytest.raises(UnsupportedOperatorError, match=r"c0.*FusedConv.*activation.*Gelu"):
        nnhal.Session(model.SerializeToString(), devices=["cpu"])


# ------------------------------------------------------------------ FusedGemm
GEMM_ACTS = [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("LeakyRelu", {"activation_alpha": 0.2}),
             ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.45}),
             ("Elu", {"activation_alpha": 0.7})]


@pytest.mark.parametrize("act,params", GEMM_ACTS)
@pytest.mark.parametrize("ta,tb", [(0, 1), (1, 0)])
def test_fused_gemm(act, params, ta, tb):
    rng = _rng(1)
    m, k, n = 5, 11, 7
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    bmat = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain=MS, activation=act, alpha=0.75,
                            beta=1.5, transA=ta, transB=tb, **params)
    model = _model([node], [_vi("a", a.shape)], [_vi("y", [m, n])],
                   [numpy_helper.from_array(bmat, "b"), numpy_helper.from_array(c, "c")])
    (got,), (want,) = _both(model, {"a": a})
    am, bm = (a.T if ta else a), (bmat.T if tb else bmat)
    # alpha, beta and the bias add: three more roundings; Elu's slope is <= 1 for alpha 0.7
    bound = 0.75 * matmul_bound(am, bm) + 2 * gamma(3) * (0.75 * np.abs(am) @ np.abs(bm) + 1.5 * np.abs(c))
    _close(got, want, bound + ELEMENTWISE * np.maximum(np.abs(want), 1))


# ------------------------------------------------------------------ FusedMatMul
@pytest.mark.parametrize("a_shape,b_shape,ta,tb", [
    ((3, 5, 4), (4, 6), 0, 0), ((2, 3, 4, 5), (2, 1, 4, 6), 1, 0), ((3, 5, 4), (3, 6, 4), 0, 1),
    ((4, 5), (6, 4), 1, 1), ((7, 4), (4,), 0, 0), ((4,), (3, 4, 2), 0, 0)])
@pytest.mark.parametrize("alpha", [1.0, 0.125, -2.5])
def test_fused_matmul(a_shape, b_shape, ta, tb, alpha):
    rng = _rng(2)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, alpha=alpha, transA=ta, transB=tb)
    a64 = np.swapaxes(a, -1, -2) if ta else a
    b64 = np.swapaxes(b, -1, -2) if tb else b
    y_shape = list(np.matmul(a64, b64).shape)
    model = _model([node], [_vi("a", a_shape), _vi("b", b_shape)], [_vi("y", y_shape)])
    (got,), (want,) = _both(model, {"a": a, "b": b})
    _close(got, want, abs(alpha) * matmul_bound(a64, b64) * (1 + 4 * U))


def _batch_moved(x, trans_batch, trans):
    """FusedMatMul's operand as onnxruntime reads it (numpy)."""
    if trans_batch:
        x = np.moveaxis(x, 0, -2)
    return np.swapaxes(x, -1, -2) if trans else x


def _stored_shape(shape, trans_batch, trans):
    """The shape an operand is stored in so that _batch_moved reads it as ``shape``."""
    shape = list(shape)
    if trans:
        shape[-1], shape[-2] = shape[-2], shape[-1]
    if trans_batch:
        shape.insert(0, shape.pop(-2))
    return tuple(shape)


@pytest.mark.parametrize("batch", [(2,), (3, 2)])
@pytest.mark.parametrize("tba,ta,tbb,tb", [(1, 0, 0, 0), (1, 1, 0, 0), (0, 0, 1, 0), (0, 0, 1, 1), (1, 0, 1, 0),
                                           (1, 1, 1, 1)])
def test_fused_matmul_trans_batch(batch, tba, ta, tbb, tb):
    a_shape = _stored_shape(batch + (3, 4), tba, ta)
    b_shape = _stored_shape(batch + (4, 5), tbb, tb)
    rng = _rng(12)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, alpha=0.5, transA=ta, transB=tb,
                            transBatchA=tba, transBatchB=tbb)
    a2, b2 = _batch_moved(a, tba, ta), _batch_moved(b, tbb, tb)
    model = _model([node], [_vi("a", a_shape), _vi("b", b_shape)], [_vi("y", list(np.matmul(a2, b2).shape))])
    (got,), (want,) = _both(model, {"a": a, "b": b})
    _close(got, want, 0.5 * matmul_bound(a2, b2) * (1 + 4 * U))
    # the oracle reads the attributes as _batch_moved does (else the two would differ by O(1))
    _close(want, 0.5 * np.matmul(a2.astype(np.float64), b2), 0.5 * matmul_bound(a2, b2))


def test_fused_matmul_trans_batch_of_a_matrix_is_refused_by_name():
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], name="fm", domain=MS, transBatchA=1)
    model = _model([node], [_vi("a", [3, 4]), _vi("b", [4, 5])], [_vi("y", [3, 5])])
    with pytest.raises(UnsupportedOperatorError, match=r"fm.*FusedMatMul.*transBatchA"):
        nnhal.Session(model.SerializeToString(), devices=["cpu"])


def test_fused_matmul_transpose_of_unknown_rank_is_refused_by_name():
    nodes = [helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("FusedMatMul", ["r", "b"], ["y"], name="fm2", domain=MS, transA=1)]
    model = _model(nodes, [_vi("a", [4, 3]), _vi("b", [4, 5])], [_vi("y", [3, 5])])
    with pytest.raises(UnsupportedOperatorError, match=r"fm2.*FusedMatMul.*transA"):
        nnhal.Session(model.SerializeToString(), devices=["cpu"])


# ------------------------------------------------------------------ Gelu family, BiasAdd
@pytest.mark.parametrize("op,with_bias", [("Gelu", False), ("BiasGelu", True), ("FastGelu", False),
                                          ("FastGelu", True)])
def test_gelu_family(op, with_bias):
    rng = _rng(3)
    x = (3 * rng.standard_normal((3, 5, 13))).astype(np.float32)
    b = rng.standard_normal(13).astype(np.float32)
    node = helper.make_node(op, ["x", "b"] if with_bias else ["x"], ["y"], domain=MS)
    model = _model([node], [_vi("x", x.shape)], [_vi("y", x.shape)], [numpy_helper.from_array(b, "b")])
    (got,), (want,) = _both(model, {"x": x})
    # NOTE: onnxruntime's FastGelu evaluates tanh by a rational approximation (MLAS) of a few ulps; the bias
    # add's rounding moves the argument by u |x + b| (slope <= 1.13)
    _close(got, want, ELEMENTWISE * np.maximum(np.abs(want), 1) + 1.13 * U * np.abs(x + b if with_bias else x))


@pytest.mark.parametrize("alpha", [None, 1.0, 0.6])
def test_quick_gelu(alpha):
    x = (4 * _rng(4).standard_normal((2, 17))).astype(np.float32)
    attrs = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, **attrs)
    (got,), (want,) = _both(_model([node], [_vi("x", x.shape)], [_vi("y", x.shape)]), {"x": x})
    _close(got, want, ELEMENTWISE * np.maximum(np.abs(want), 1))


def test_bias_add():
    rng = _rng(5)
    x, skip = rng.standard_normal((2, 3, 8)).astype(np.float32), rng.standard_normal((2, 3, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    node = helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)
    model = _model([node], [_vi("x", x.shape), _vi("s", skip.shape)], [_vi("y", x.shape)],
                   [numpy_helper.from_array(b, "b")])
    # onnxruntime has BiasAdd for CUDA only: float64 is the oracle, two float32 roundings the bound
    with nnhal.Session(model.SerializeToString(), devices=["cpu"]) as sess:
        (got,) = sess.run({"x": x, "s": skip})
    want = x.astype(np.float64) + b + skip
    assert got.dtype == np.float32
    _close(got, want, gamma(2) * (np.abs(x) + np.abs(b) + np.abs(skip)))


# ------------------------------------------------------------------ normalizations
def _ln_bound(x, scale, extra=0.0):
    """Two evaluations of a normalization over the last axis (h terms): the mean and the variance each
    within gamma(h) relative, so the normalized value within ~ 2 gamma(h + 4) (|x̂| + 1), times |scale|."""
    h = x.shape[-1]
    return 4 * gamma(h + 4) * (np.abs((x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)) + 1) \
        * np.abs(scale) + extra


@pytest.mark.parametrize("beta,bias,sum_out", [(True, True, False), (False, False, False), (True, True, True),
                                               (False, True, True)])
def test_skip_layer_normalization(beta, bias, sum_out):
    rng = _rng(6)
    h = 24
    x = rng.standard_normal((2, 5, h)).astype(np.float32)
    s = rng.standard_normal((2, 5, h)).astype(np.float32)
    g, bt, bs = (rng.standard_normal(h).astype(np.float32) for _ in range(3))
    ins = ["x", "s", "g", "bt" if beta else "", "bs" if bias else ""]
    while not ins[-1]:
        ins.pop()
    outs = ["y", "", "", "sum"] if sum_out else ["y"]
    node = helper.make_node("SkipLayerNormalization", ins, outs, domain=MS, epsilon=1e-5)
    inits = [numpy_helper.from_array(v, n) for v, n in ((g, "g"), (bt, "bt"), (bs, "bs"))]
    outputs = [_vi("y", x.shape)] + ([_vi("sum", x.shape)] if sum_out else [])
    model = _model([node], [_vi("x", x.shape), _vi("s", s.shape)], outputs, inits)
    got, want = _both(model, {"x": x, "s": s})
    total = x + s + (bs if bias else 0)
    _close(got[0], want[0], _ln_bound(total, g, 2 * U * np.abs(bt if beta else 0)))
    if sum_out:
        _close(got[1], want[1], 2 * gamma(2) * (np.abs(x) + np.abs(s) + np.abs(bs if bias else 0)))


def test_skip_layer_normalization_statistics_output_is_refused():
    node = helper.make_node("SkipLayerNormalization", ["x", "s", "g"], ["y", "mean"], name="sln", domain=MS)
    model = _model([node], [_vi("x", [1, 2, 4]), _vi("s", [1, 2, 4])], [_vi("y", [1, 2, 4]), _vi("mean", None)],
                   [numpy_helper.from_array(np.ones(4, np.float32), "g")])
    with pytest.raises(UnsupportedOperatorError, match=r"sln.*SkipLayerNormalization.*output 1"):
        nnhal.Session(model.SerializeToString(), devices=["cpu"])


@pytest.mark.parametrize("bias", [False, True])
def test_skip_simplified_layer_normalization(bias):
    rng = _rng(7)
    h = 20
    x, s = rng.standard_normal((3, 4, h)).astype(np.float32), rng.standard_normal((3, 4, h)).astype(np.float32)
    g, bs = rng.standard_normal(h).astype(np.float32), rng.standard_normal(h).astype(np.float32)
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"] + (["bs"] if bias else []), ["y"],
                            domain=MS, epsilon=1e-6)
    model = _model([node], [_vi("x", x.shape), _vi("s", s.shape)], [_vi("y", x.shape)],
                   [numpy_helper.from_array(g, "g"), numpy_helper.from_array(bs, "bs")])
    (got,), (want,) = _both(model, {"x": x, "s": s})
    total = x + s + (bs if bias else 0)
    rms = np.sqrt((total.astype(np.float64) ** 2).mean(-1, keepdims=True))
    _close(got, want, 4 * gamma(h + 4) * (np.abs(total / rms) + 1) * np.abs(g))


@pytest.mark.parametrize("opset,domain", [(14, ""), (17, MS)])
def test_layer_normalization_of_onnxruntime(opset, domain):
    rng = _rng(8)
    x = rng.standard_normal((2, 3, 10)).astype(np.float32)
    g, b = rng.standard_normal(10).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "", "inv"], domain=domain, axis=-1,
                            epsilon=1e-5)
    model = _model([node], [_vi("x", x.shape)], [_vi("y", x.shape), _vi("inv", [2, 3, 1])],
                   [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b")], opset=opset)
    if domain == MS:
        # onnxruntime has no com.microsoft LayerNormalization: its ONNX-domain one (opset 17) is the oracle
        ref = onnx.ModelProto()
        ref.CopyFrom(model)
        ref.graph.node[0].domain = ""
        want = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        with nnhal.Session(model.SerializeToString(), devices=["cpu"]) as s:
            got = s.run({"x": x})
    else:
        got, want = _both(model, {"x": x})
    _close(got[0], want[0], _ln_bound(x, g, 2 * U * np.abs(b)))
    _close(got[1], want[1], 4 * gamma(14) * np.abs(want[1]))


def test_simplified_layer_normalization():
    rng = _rng(9)
    x = rng.standard_normal((4, 3, 16)).astype(np.float32)
    g = rng.standard_normal(16).astype(np.float32)
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-5)
    model = _model([node], [_vi("x", x.shape)], [_vi("y", x.shape)], [numpy_helper.from_array(g, "g")], opset=14)
    (got,), (want,) = _both(model, {"x": x})
    rms = np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True))
    _close(got, want, 4 * gamma(20) * (np.abs(x / rms) + 1) * np.abs(g))


# ------------------------------------------------------------------ models saved by onnxruntime's optimizer
def _ms_ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node if n.domain == MS}


MODEL_OPS = {"encoder": {"FusedMatMul", "SkipLayerNormalization", "Gelu"},
             "convnet": {"FusedConv", "FusedGemm", "QuickGelu"},
             "decoder": {"FusedMatMul", "SkipLayerNormalization"}}


@pytest.fixture(scope="module", params=[("encoder", 17), ("convnet", 17), ("decoder", 17), ("encoder", 14),
                                        ("decoder", 14)], ids=lambda p: f"{p[0]}-opset{p[1]}")
def saved(request):
    pytest.importorskip("torch")
    name, opset = request.param
    original = ms_models.exported(name, opset)
    return name, original, ms_models.ort_optimized(original)


def test_saved_model_runs_like_the_original(saved):
    name, original, optimized = saved
    assert MODEL_OPS[name] <= _ms_ops(optimized)       # the file holds what this test is about
    feeds = ms_models.feeds(name)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (want,) = ort.InferenceSession(original, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    with nnhal.Session(optimized.SerializeToString(), devices=["cpu"]) as s:
        (got,) = s.run(feeds)
    # NOTE: a few chained float32 layers (k <= 4 * 48 products each, LayerNorm over 48, Softmax): each layer
    # within gamma(k) of its magnitude and normalizations keeping values O(1); 4 layers deep, 4 * gamma(200)
    # relative to the output's scale bounds both sides' rounding
    scale = max(float(np.abs(want).max()), 1.0)
    _close(got, want, 8 * gamma(200) * scale * 4)


def _steps(name: str, data: bytes) -> list[tuple[str, str]]:
    """(op, kernel) of every step the cpu device planned for ``data``, sorted."""
    with nnhal.Session(data, devices=["cpu"]) as s:
        s.run(ms_models.feeds(name))
        return sorted((st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps)


def test_saved_convnet_plans_like_the_original():
    """The expanded FusedConv / FusedGemm / QuickGelu fuse back: the onnxruntime-saved convnet plans into the
    very steps (op and kernel) of the original export: each activation in its conv's or GEMM's epilogue."""
    pytest.importorskip("torch")
    original = ms_models.exported("convnet")
    optimized = ms_models.ort_optimized(original).SerializeToString()
    orig_steps, opt_steps = _steps("convnet", original), _steps("convnet", optimized)
    assert orig_steps and opt_steps == orig_steps
    assert not {"Sigmoid", "Tanh", "Clip", "HardSigmoid", "Mul", "CastLike"} & {op for op, _ in opt_steps}


def test_scale_of_untyped_intermediate_is_cast_like_it():
    """FusedMatMul's alpha on a tensor whose type the model records nowhere (an If's output): a float32
    constant cast like the product, still exact."""
    rng = _rng(10)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    branch = helper.make_graph([helper.make_node("Identity", ["a"], ["t"])], "br", [], [_vi("t", None)])
    nodes = [helper.make_node("If", ["c"], ["r"], then_branch=branch, else_branch=branch),
             helper.make_node("FusedMatMul", ["r", "b"], ["y"], domain=MS, alpha=0.3)]
    model = _model(nodes, [_vi("c", [], TensorProto.BOOL), _vi("a", [3, 4]), _vi("b", [4, 5])], [_vi("y", [3, 5])])
    (got,), (want,) = _both(model, {"c": np.array(True), "a": a, "b": b})
    _close(got, want, 0.3 * matmul_bound(a, b) * (1 + 4 * U))


@pytest.mark.parametrize("name", ["encoder", "decoder"])
def test_saved_transformer_plans_like_the_original(name):
    """The expanded FusedMatMul / SkipLayerNormalization / Gelu, and onnxruntime's Reshape -> Gemm -> Reshape
    (unfold_reshaped_gemm), plan into the very steps of the original export: bias, residual and Gelu in the
    MatMul's epilogue, the attention fused."""
    pytest.importorskip("torch")
    original = ms_models.exported(name)
    optimized = ms_models.ort_optimized(original).SerializeToString()
    orig_steps, opt_steps = _steps(name, original), _steps(name, optimized)
    assert orig_steps and opt_steps == orig_steps


def test_transformers_optimizer_decoder_runs_and_plans_like_the_original():
    """onnxruntime.transformers' GPT-2 fusions: SkipLayerNormalization with bias and its input_skip_bias_sum
    output read by the next residual, FastGelu with bias; against onnxruntime on the original, and the same
    plan as the original export."""
    pytest.importorskip("torch")
    original = ms_models.exported("decoder")
    optimized = ms_models.transformers_optimized(original, "gpt2", 2, 32)
    skip = [n for n in optimized.graph.node if n.op_type == "SkipLayerNormalization"]
    assert {"SkipLayerNormalization", "FastGelu"} <= _ms_ops(optimized)
    assert any(len(n.output) == 4 and n.output[3] for n in skip) and all(len(n.input) == 5 for n in skip)
    feeds = ms_models.feeds("decoder")
    (want,) = ort.InferenceSession(original, providers=["CPUExecutionProvider"]).run(None, feeds)
    data = optimized.SerializeToString()
    with nnhal.Session(data, devices=["cpu"]) as s:
        (got,) = s.run(feeds)
    _close(got, want, 8 * gamma(200) * max(float(np.abs(want).max()), 1.0) * 4)
    assert _steps("decoder", data) == _steps("decoder", original)


def test_skip_layer_normalization_with_only_the_sum_read():
    rng = _rng(11)
    x, s = rng.standard_normal((2, 3, 8)).astype(np.float32), rng.standard_normal((2, 3, 8)).astype(np.float32)
    node = helper.make_node("SkipLayerNormalization", ["x", "s", "g"], ["", "", "", "sum"], domain=MS)
    model = _model([node], [_vi("x", x.shape), _vi("s", s.shape)], [_vi("sum", x.shape)],
                   [numpy_helper.from_array(np.ones(8, np.float32), "g")])
    with nnhal.Session(model.SerializeToString(), devices=["cpu"]) as sess:
        (got,) = sess.run({"x": x, "s": s})
    np.testing.assert_array_equal(got, x + s)       # one float32 add each way: bit-equal


def test_scale_of_a_non_float_tensor_is_refused():
    """A scalar is never cast into an integer type (0.3 would become 0): the node is refused by name."""
    node = helper.make_node("QuickGelu", ["x"], ["y"], name="qg", domain=MS, alpha=0.3)
    model = _model([node], [_vi("x", [2], TensorProto.INT32)], [_vi("y", [2], TensorProto.INT32)])
    with pytest.raises(UnsupportedOperatorError, match=r"qg.*QuickGelu.*INT32"):
        nnhal.Session(model.SerializeToString(), devices=["cpu"])


def test_float16_scalars_take_the_tensor_type():
    """In a float16 model the scalars the expansion writes (FusedMatMul's alpha, QuickGelu's alpha) are float16
    constants: against float64, within float16 rounding of the product (k = 6) and of the gate."""
    rng = _rng(13)
    a = rng.standard_normal((2, 3, 6)).astype(np.float16)
    b = rng.standard_normal((6, 5)).astype(np.float16)
    nodes = [helper.make_node("FusedMatMul", ["a", "b"], ["p"], domain=MS, alpha=0.75),
             helper.make_node("QuickGelu", ["p"], ["y"], domain=MS, alpha=0.6)]
    model = _model(nodes, [_vi("a", a.shape, TensorProto.FLOAT16)], [_vi("y", [2, 3, 5], TensorProto.FLOAT16)],
                   [numpy_helper.from_array(b, "b")])
    with nnhal.Session(model.SerializeToString(), devices=["cpu"]) as s:
        (got,) = s.run({"a": a})
    assert got.dtype == np.float16
    p = 0.75 * (a.astype(np.float64) @ b.astype(np.float64))
    want = p / (1 + np.exp(-0.6 * p))
    u16 = float(np.finfo(np.float16).eps) / 2
    # the product's k + 2 roundings (scale included), the gate's few; the gate's slope is <= 1.1
    bound = 1.1 * 0.75 * gamma(8, np.float16) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) \
        + 8 * u16 * np.maximum(np.abs(want), 1)
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


@pytest.mark.parametrize("segment,pos_ids,mask", [(True, False, True), (False, False, False), (True, True, False),
                                                  (False, True, True)])
def test_embed_layer_normalization(segment, pos_ids, mask):
    rng = _rng(14)
    b, s, h, vocab = 2, 6, 16, 30
    ids = rng.integers(0, vocab, (b, s)).astype(np.int32)
    seg_ids = rng.integers(0, 2, (b, s)).astype(np.int32)
    pids = rng.integers(0, 10, (1, s)).astype(np.int32)
    m = np.array([[1] * 6, [1] * 4 + [0] * 2], np.int32)
    word, pos, seg = (rng.standard_normal(sh).astype(np.float32) for sh in ((vocab, h), (10, h), (2, h)))
    g, bt = rng.standard_normal(h).astype(np.float32), rng.standard_normal(h).astype(np.float32)
    ins = ["ids", "seg_ids" if segment else "", "word", "pos", "seg" if segment else "", "g", "bt",
           "mask" if mask else "", "pids" if pos_ids else ""]
    while not ins[-1]:
        ins.pop()
    outs = ["y", "mask_index" if mask else "", "sum"]
    node = helper.make_node("EmbedLayerNormalization", ins, outs, domain=MS, epsilon=1e-5)
    feeds = {"ids": ids}
    inputs = [_vi("ids", [b, s], TensorProto.INT32)]
    for use, name, value in ((segment, "seg_ids", seg_ids), (mask, "mask", m), (pos_ids, "pids", pids)):
        if use:
            feeds[name] = value
            inputs.append(_vi(name, list(value.shape), TensorProto.INT32))
    outputs = [_vi("y", [b, s, h])] + ([_vi("mask_index", [b], TensorProto.INT32)] if mask else []) \
        + [_vi("sum", [b, s, h])]
    inits = [numpy_helper.from_array(v, n) for v, n in ((word, "word"), (pos, "pos"), (seg, "seg"), (g, "g"),
                                                       (bt, "bt"))]
    got, want = _both(_model([node], inputs, outputs, inits), feeds)
    total = word[ids].astype(np.float64) + (pos[pids] if pos_ids else pos[:s]) + (seg[seg_ids] if segment else 0)
    _close(got[0], want[0], _ln_bound(total, g, 2 * U * np.abs(bt)))
    if mask:
        np.testing.assert_array_equal(got[1], want[1])
    _close(got[-1], want[-1], gamma(2) * np.abs(total) * 2)
