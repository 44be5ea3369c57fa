"""MatMulInteger and QLinearMatMul with both operands at run time (attention's QK^T and PV in quantized
transformers) on the cpu device's integer GEMM, each matrix of B packed per run: bit for bit against
onnx.reference (ONNX's exact int32 sums; QLinearMatMul's requantization in double, rounded half to even) on
batched, broadcast and odd shapes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import qnative

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")

TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float32): TensorProto.FLOAT}


def _model(nodes, feeds: dict, inits: dict, y_dtype):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TYPES[v.dtype], v.shape)
                                           for k, v in feeds.items()],
                              [helper.make_tensor_value_info("y", TYPES[np.dtype(y_dtype)], None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _run(model, feeds, op):
    with nnhal.Session(model, devices=["cpu"]) as session:
        (got,) = session.run(feeds)
        kernels = [st.kernel_name for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps
                   if st.node.op_type == op]
    return got, kernels


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


SHAPES = [((2, 3, 7, 37), (2, 3, 37, 19)),      # heads
          ((3, 1, 5, 64), (1, 4, 64, 9)),       # broadcast on both sides
          ((6, 33), (2, 33, 17)),               # 2-D A against a batch of B
          ((2, 5, 40), (40, 3)),                # one run-time matrix
          ((1, 130), (130, 1))]


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
def test_matmul_integer_with_a_runtime_b_is_exact(a_shape, b_shape, adt, bdt):
    rng = np.random.default_rng(21)
    feeds = {"x": _ints(rng, adt, a_shape), "w": _ints(rng, bdt, b_shape),
             "zw": np.array(rng.integers(0, 9), bdt)}
    inits = {"za": np.array(rng.integers(0, 100), adt)}
    model = _model([helper.make_node("MatMulInteger", ["x", "w", "za", "zw"], ["y"])], feeds, inits, np.int32)
    got, kernels = _run(model, feeds, "MatMulInteger")
    assert kernels == ["int8 gemm"]
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("adt,bdt,ydt", [(np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8),
                                         (np.uint8, np.int8, np.uint8)])
def test_qlinear_matmul_with_a_runtime_b_equals_onnx_reference(a_shape, b_shape, adt, bdt, ydt):
    rng = np.random.default_rng(22)
    feeds = {"x": _ints(rng, adt, a_shape), "w": _ints(rng, bdt, b_shape)}
    inits = {"sa": np.array(0.013, np.float32), "za": np.array(rng.integers(0, 90), adt),
             "sb": np.array(0.021, np.float32), "zb": np.array(rng.integers(0, 9), bdt),
             "sy": np.array(0.9, np.float32), "zy": np.array(rng.integers(0, 40), ydt)}
    node = helper.make_node("QLinearMatMul", ["x", "sa", "za", "w", "sb", "zb", "sy", "zy"], ["y"])
    model = _model([node], feeds, inits, ydt)
    got, kernels = _run(model, feeds, "QLinearMatMul")
    assert kernels == ["int8 gemm"]
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got, want)
