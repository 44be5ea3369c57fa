"""Split of a static shape by constant sizes (op_split.StaticSplitKernel) against the ONNX reference: a pure
copy, so bit-equal."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal


@pytest.mark.parametrize("axis,split,outputs", [(1, [1, 3], 2), (2, None, 2), (0, [2, 0, 1], 3), (-1, None, 3)])
def test_static_split_equals_the_reference(axis, split, outputs):
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    names = [f"y{i}" for i in range(outputs)]
    inits = [numpy_helper.from_array(np.array(split, np.int64), "s")] if split else []
    attrs = {} if split else {"num_outputs": outputs}
    node = helper.make_node("Split", ["x", "s"] if split else ["x"], names, name="split", axis=axis, **attrs)
    graph = helper.make_graph([node], "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    want = ReferenceEvaluator(model).run(None, {"x": x})
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        assert s.subgraphs[0].stats["kernels"]["split"] == "static"
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
