"""optimizer/quantize.py: a Conv whose only reader is a Relu (or a Clip) takes that clamp's output parameters
(clamped_by), as onnxruntime's quantizer does: the clamp is then a clamp of codes, which the cpu device folds into
the integer convolution under int8 (no CodeTable left), bit-equal to the reference kernels on both plan paths;
a Conv read by anything else keeps its own parameters. (uint8 already absorbed such clamps in the conv's output
range, precision._absorbs; the uint8 cases guard that this stays so.)"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import qnative
from nnhal.optimizer.quantize import clamped_by
from nnhal.serializer.onnx_import import load_onnx


def _model():
    """x -> Conv a -> Relu -> Conv b -> Clip(0, 6) -> Conv c -> Relu -> y, and Conv c's output is also read
    by an Add (its Relu is not its sole reader)."""
    rng = np.random.default_rng(3)
    inits = {f"w{k}": (rng.standard_normal((8, 8 if k != "a" else 3, 3, 3)) * 0.3).astype(np.float32)
             for k in "abc"}
    inits.update({"zero": np.array(0.0, np.float32), "six": np.array(6.0, np.float32)})
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wb"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["b", "zero", "six"], ["br"]),
             helper.make_node("Conv", ["br", "wc"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["cr"]),
             helper.make_node("Add", ["cr", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model, rng.standard_normal((2, 3, 9, 7)).astype(np.float32)


def test_a_conv_read_only_by_a_clamp_shares_its_parameters():
    model, _ = _model()
    g = load_onnx(model)

    class Sg:
        nodes, keep_fp32 = g.nodes, frozenset()

    table = {name: (-1.0, 1.0) for name in ("a", "ar", "b", "br", "c", "cr")}
    assert clamped_by(g, [Sg], table) == {"a": "ar", "b": "br"}
    Sg.keep_fp32 = frozenset({g.nodes[1].name})            # a clamp left in float shares nothing
    assert clamped_by(g, [Sg], table) == {"b": "br"}


@pytest.mark.skipif(not qnative.status().available, reason=f"integer kernels not loaded: {qnative.status().reason}")
@pytest.mark.parametrize("precision", ["int8", "uint8"])
@pytest.mark.parametrize("checked", ["0", "1"])
def test_the_clamps_fold_into_the_integer_convolutions(precision, checked, monkeypatch):
    model, x = _model()
    table = nnhal.calibrate(model, [{"x": x}], progress=False)
    monkeypatch.setenv("NNHAL_CHECK", checked)
    monkeypatch.setenv("NNHAL_FLOAT_CONVS", "0")      # the shallow stem on the integer kernels too
    with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as s:
        (got,) = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
        ops = [st.node.op_type for st in steps]
        in_conv = [st.kernel_name for st in steps if st.kernel_name.endswith("+table")]
    assert ops.count("QLinearConv") == 3, ops
    # Conv c's Relu: c has two readers, so its Relu is no clamp of c's codes; with the Add it is one CodeTable
    # (optimizer/qtables.py), left as a step or applied in c's write-back (integer.fuse_code_tables)
    assert ops.count("CodeTable") + ops.count("Relu") + len(in_conv) == 1, ops
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as s:
        (want,) = s.run({"x": x})
    np.testing.assert_array_equal(got, want)
    with nnhal.Session(model) as s:
        (ref,) = s.run({"x": x})
    cos = float(np.sum(got * ref) / (np.linalg.norm(got) * np.linalg.norm(ref)))
    assert cos > 0.99, cos
