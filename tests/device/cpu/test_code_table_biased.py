"""kernels/qlinear_tables.py: a per-channel bias CodeTable (DequantizeLinear -> Add(bias) -> QuantizeLinear, its
parameters kept in ``affine`` by optimizer/qtables.py) runs computed (the integer kernels' ``biased``) where that
reproduces the table on every entry, with the same codes as the table's gather, and keeps the table where it
does not."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import qnative
from nnhal.device.cpu.kernels import qlinear_tables
from nnhal.optimizer.qtables import fuse_code_tables
from tests.optimizer.test_qtables import _bias_graph

pytestmark = pytest.mark.skipif(not qnative.available() or qnative.status().isa == "portable",
                                reason="the computed bias chain needs the integer kernels' AVX2")


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_the_description_is_taken_only_when_it_reproduces_the_table(dtype):
    table, affine = _table_and_affine(_bias_graph(dtype, (40,), x_shape=(3, 7, 40))[1])
    q = qnative.kernels()
    operands = qlinear_tables.biased_operands(q, affine, table)
    assert operands is not None
    wrong = table.copy()
    wrong[5, 17] ^= 1                   # one entry of one channel differs: the table stays
    assert qlinear_tables.biased_operands(q, affine, wrong) is None
    assert qlinear_tables.biased_operands(q, affine[:-1], table) is None      # a channel short
    assert qlinear_tables.biased_operands(q, (), table) is None


def _model(dtype, channels, zero, x_shape):
    """x -> DequantizeLinear -> Add(bias[C]) -> QuantizeLinear -> y with saturating biases and a rounding tie."""
    types = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
    bias = (np.random.default_rng(channels).standard_normal(channels) * 4).astype(np.float32)
    bias[0], bias[1] = 1e4, -1e4                        # every code saturates
    bias[2] = np.float32(0.125)                         # half of y's step: ties at even codes
    inits = {"sx": np.array(0.25, np.float32), "zx": np.array(zero, dtype), "b": bias,
             "sy": np.array(0.25, np.float32), "zy": np.array(zero, dtype)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("Add", ["xf", "b"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", types[np.dtype(dtype)], x_shape)],
                              [helper.make_tensor_value_info("y", types[np.dtype(dtype)], None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("channels", [3, 8, 13, 384])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_session_computes_the_bias_chain_like_the_table(dtype, channels, threads, monkeypatch):
    """The session's codes equal the [C, 256] table's gather exactly and onnx.reference's within one code (it
    may divide in another precision), on odd channel counts (the vector tail) and two threads."""
    from onnx.reference import ReferenceEvaluator

    zero = 5 if dtype == np.uint8 else -3
    x_shape = (600, channels)
    model = _model(dtype, channels, zero, x_shape)
    x = np.random.default_rng(1).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, x_shape, dtype=dtype)
    calls = []
    taken = qlinear_tables.biased_operands

    def spy(*args):
        calls.append(taken(*args))
        return calls[-1]

    monkeypatch.setattr(qlinear_tables, "biased_operands", spy)
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        (got,) = s.run({"x": x})
    assert len(calls) == 1 and calls[0] is not None
    table, _ = _table_and_affine(model)
    np.testing.assert_array_equal(got, table[np.arange(channels), x.view(np.uint8)])
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert np.max(np.abs(got.astype(np.int32) - want.astype(np.int32))) <= 1
    assert (got[:, 0] == np.iinfo(dtype).max).all() and (got[:, 1] == np.iinfo(dtype).min).all()


def _table_and_affine(model):
    """The CodeTable's table and affine description qtables makes of a one-chain model."""
    from nnhal.optimizer.infer import infer_graph
    from nnhal.serializer.onnx_import import load_onnx

    g = load_onnx(model)
    infer_graph(g, fold=False)
    fuse_code_tables(g)
    (node,) = g.nodes
    return np.asarray(g.tensors[node.inputs[1]].value), node.attrs["affine"]
