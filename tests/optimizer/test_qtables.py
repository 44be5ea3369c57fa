"""optimizer/qtables.py: an element-wise chain between 8-bit tensors becomes one ai.nnhal CodeTable whose
result equals the chain's host kernels element for element; chains that read another activation, a
non-scalar constant, or whose inner tensors are read elsewhere stay as they are; the cpu device's int8
lowering of a convolution with SiLU runs the table."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.hostkernels.graphrun import interpret
from nnhal.optimizer.infer import infer_graph
from nnhal.optimizer.qtables import fuse_code_tables
from nnhal.serializer.onnx_import import load_onnx

TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _silu_graph(dtype, extra_reader=False, vector_scale=False):
    """x (8-bit) -> DequantizeLinear -> Sigmoid -> QuantizeLinear -> QLinearMul(x, .) -> y; with
    ``extra_reader`` the Sigmoid's output is a graph output too; with ``vector_scale`` the QuantizeLinear's
    scale has one value per channel."""
    zero = np.array(3 if dtype == np.uint8 else -2, dtype)
    inits = {"sx": np.array(0.05, np.float32), "zx": zero, "ss": np.array(1 / 255, np.float32),
             "zs": np.array(0, dtype), "sy": np.array(0.03, np.float32), "zy": zero}
    q_params = ["ss", "zs"]
    if vector_scale:
        inits["ssv"] = np.full(4, 1 / 255, np.float32)
        inits["zsv"] = np.zeros(4, dtype)
        q_params = ["ssv", "zsv"]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("Sigmoid", ["xf"], ["sig"]),
             helper.make_node("QuantizeLinear", ["sig", *q_params], ["sq"], axis=1),
             helper.make_node("QLinearMul", ["x", "sx", "zx", "sq", "ss", "zs", "sy", "zy"], ["y"],
                              domain="com.microsoft")]
    outputs = [helper.make_tensor_value_info("y", TYPES[np.dtype(dtype)], None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("sig", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[np.dtype(dtype)], [2, 4, 3, 3])],
                              outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19),
                                                    helper.make_opsetid("com.microsoft", 1)], ir_version=9)
    g = load_onnx(model)
    infer_graph(g, fold=False)
    return g


def _run(g, x):
    values = {"x": x}
    interpret(g, g.nodes, ["x"], list(g.outputs)).run(values)
    return [values[o] for o in g.outputs]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_quantized_silu_is_one_table_equal_to_the_chain(dtype):
    g = _silu_graph(dtype)
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(1, 256)
    x = np.resize(x, (2, 4, 3, 3)).astype(dtype)
    x.reshape(-1)[:] = np.random.default_rng(0).permutation(np.resize(np.arange(256, dtype=np.uint8).view(dtype),
                                                                      x.size))
    want = _run(g, x)
    assert fuse_code_tables(g) == 1
    assert [n.op_type for n in g.nodes] == ["CodeTable"]
    for got, w in zip(_run(g, x), want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("case", ["an inner tensor read elsewhere", "a per-channel scale"])
def test_chains_that_do_not_qualify_stay(case):
    g = _silu_graph(np.uint8, extra_reader=case == "an inner tensor read elsewhere",
                    vector_scale=case == "a per-channel scale")
    before = [n.op_type for n in g.nodes]
    x = np.random.default_rng(1).integers(0, 256, (2, 4, 3, 3), dtype=np.uint8)
    want = _run(g, x)
    fuse_code_tables(g)
    assert "QLinearMul" in [n.op_type for n in g.nodes] and "Sigmoid" in [n.op_type for n in g.nodes], before
    for got, w in zip(_run(g, x), want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("check", ["0", "1"])
def test_the_cpu_int8_lowering_runs_a_conv_silu_as_a_table(check, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", check)
    monkeypatch.setenv("NNHAL_FLOAT_CONVS", "0")      # the shallow stem on the integer kernels too
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("Conv", ["m", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"),
                               numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32) * 0.3,
                                                       "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    with nnhal.Session(model) as s:
        (ref,) = s.run({"x": x})
    with nnhal.Session(model, devices=["cpu"], precision="int8") as s:
        (got,) = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
        ops = [st.node.op_type for st in steps]
    # the table a step of its own, or applied in the convolution's write-back (integer.fuse_code_tables)
    tabled = "CodeTable" in ops or any(st.kernel_name.endswith("+table") for st in steps)
    assert tabled and "Sigmoid" not in ops, ops
    cos = float(np.sum(got * ref) / (np.linalg.norm(got) * np.linalg.norm(ref)))
    assert cos > 0.99, cos


def _bias_graph(dtype, bias_shape, x_shape=(2, 5, 6)):
    """x (8-bit) -> DequantizeLinear -> Add(a float constant of ``bias_shape``) -> QuantizeLinear -> y: a static
    QDQ model's bias Add once constant folding has made its quantized bias a float vector."""
    zero = np.array(7 if dtype == np.uint8 else -3, dtype)
    bias = np.random.default_rng(3).standard_normal(bias_shape).astype(np.float32)
    inits = {"sx": np.array(0.04, np.float32), "zx": zero, "b": bias, "sy": np.array(0.05, np.float32), "zy": zero}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]), helper.make_node("Add", ["xf", "b"],
                                                                                             ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[np.dtype(dtype)], x_shape)],
                              [helper.make_tensor_value_info("y", TYPES[np.dtype(dtype)], None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    g = load_onnx(model)
    infer_graph(g, fold=False)
    return g, model


@pytest.mark.parametrize("bias_shape", [(6,), (1, 6), (1, 1, 6)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_bias_along_the_last_axis_is_one_table_per_channel(dtype, bias_shape):
    g, _ = _bias_graph(dtype, bias_shape)
    x = np.random.default_rng(4).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (2, 5, 6), dtype=dtype)
    want = _run(g, x)
    assert fuse_code_tables(g) == 1
    assert [n.op_type for n in g.nodes] == ["CodeTable"]
    assert g.tensors[g.nodes[0].inputs[1]].value.shape == (6, 256)
    for got, w in zip(_run(g, x), want):
        np.testing.assert_array_equal(got, w)


def test_a_constant_along_another_axis_stays():
    g, _ = _bias_graph(np.uint8, (5, 1))
    fuse_code_tables(g)
    assert "Add" in [n.op_type for n in g.nodes]


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_the_cpu_device_runs_a_per_channel_table_like_the_onnx_reference(dtype, check, monkeypatch):
    from onnx.reference import ReferenceEvaluator

    from nnhal.optimizer.qdq import fuse_qdq_elementwise

    monkeypatch.setenv("NNHAL_CHECK", check)
    g, model = _bias_graph(dtype, (40,), x_shape=(3, 7, 40))
    fuse_qdq_elementwise(g)
    assert [n.op_type for n in g.nodes] == ["CodeTable"]      # what the session's passes make of it
    x = np.random.default_rng(5).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (3, 7, 40), dtype=dtype)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    with nnhal.Session(model, devices=["cpu"]) as s:
        (got,) = s.run({"x": x})
        kernels = {st.node.op_type: st.kernel_name for sg in s.graph.execution.subgraphs
                   for st in sg.device_graph.steps}
    assert kernels == {"CodeTable": "table"}, kernels
    # quantized tolerance (off by one): onnx.reference may divide in another precision than the host kernels
    assert np.max(np.abs(got.astype(np.int32) - want.astype(np.int32))) <= 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_bias_chain_carries_its_parameters(dtype):
    """The [C, 256] table of DequantizeLinear -> Add(bias) -> QuantizeLinear keeps the chain's scales, zero
    points and bias beside it (attribute ``affine``); another per-channel chain (a Mul) carries none."""
    g, _ = _bias_graph(dtype, (1, 6))
    zero = 7 if dtype == np.uint8 else -3
    bias = [float(v) for v in g.tensors["b"].value.reshape(-1)]
    fuse_code_tables(g)
    assert g.nodes[0].attrs["affine"] == pytest.approx([np.float32(0.04), zero, np.float32(0.05), zero] + bias,
                                                       rel=0, abs=0)
    g, _ = _bias_graph(dtype, (6,))
    g.nodes[1].op_type = "Mul"
    fuse_code_tables(g)
    assert [n.op_type for n in g.nodes] == ["CodeTable"] and not g.nodes[0].attrs.get("affine")
