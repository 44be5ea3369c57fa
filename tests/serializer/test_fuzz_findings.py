"""What the fuzzer found, one model each: a typed error naming node, op and opset where a numpy or Python
exception escaped (or was only caught by a safety net) before."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _f(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _run(model, feeds):
    with nnhal.Session(model) as s:
        return s.run(feeds)


def _conv(kernel_shape=None, strides=None, w_shape=(4, 3, 3, 3), x_input=False):
    attrs = {k: v for k, v in (("kernel_shape", kernel_shape), ("strides", strides)) if v is not None}
    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
    inputs = [_f("x", [1, 3, 8, 8])] + ([_f("w", list(w_shape))] if x_input else [])
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)], inputs, [_f("y", None)],
                  [] if x_input else [w])


def test_an_attribute_of_the_wrong_type_is_refused_at_import():
    model = _conv()
    model.graph.node[0].attribute.append(helper.make_attribute("group", 1.5))   # FLOAT where INT is declared
    with pytest.raises(nnhal.ModelError, match=r"node 'conv' \(Conv, opset 17\): attribute 'group' must be INT, "
                                               r"got FLOAT"):
        nnhal.Session(model)


def test_a_repeated_attribute_is_refused():
    model = _conv(strides=[1, 1])
    model.graph.node[0].attribute.append(helper.make_attribute("strides", [2, 2]))
    with pytest.raises(nnhal.ModelError, match="gives attribute 'strides' twice"):
        nnhal.Session(model)


@pytest.mark.parametrize("strides, match", [([0, 1], "strides must be >= 1"), ([1], "strides .* has 1 values")])
def test_window_attributes_are_checked(strides, match):
    with pytest.raises(nnhal.ModelError, match=match):
        _run(_conv(strides=strides), {"x": np.ones((1, 3, 8, 8), np.float32)})


def test_kernel_shape_must_match_the_weight_also_when_the_weight_comes_at_run_time():
    with pytest.raises(nnhal.ShapeError, match=r"node 'conv' \(Conv, opset 17\): kernel_shape \[2, 2\] differs"):
        _run(_conv(kernel_shape=[2, 2]), {"x": np.ones((1, 3, 8, 8), np.float32)})
    model = _conv(x_input=True)
    model.graph.input[1].type.tensor_type.ClearField("shape")       # the weight's shape: known only at run time
    with pytest.raises(nnhal.ShapeError, match=r"node 'conv' \(Conv, opset 17\): input has 3 channels"):
        _run(model, {"x": np.ones((1, 3, 8, 8), np.float32), "w": np.ones((4, 2, 3, 3), np.float32)})


def test_a_required_input_left_empty_is_refused():
    model = _model([helper.make_node("Add", ["", "x"], ["y"], name="add")], [_f("x", [2])], [_f("y", [2])])
    with pytest.raises(nnhal.ModelError, match=r"node 'add' \(Add, opset 17\): input 0 \('A'\) is required"):
        nnhal.Session(model)


def test_a_trailing_empty_input_is_an_absent_optional_one():
    model = _model([helper.make_node("Relu", ["x", ""], ["y"], name="relu")], [_f("x", [2])], [_f("y", [2])])
    np.testing.assert_array_equal(_run(model, {"x": np.array([-1, 2], np.float32)})[0], [0, 2])


def test_an_input_element_type_the_schema_does_not_allow_is_refused():
    model = _model([helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2])],
                   [_f("x", [1, 1, 4], TensorProto.BOOL)], [_f("y", None)])
    with pytest.raises(nnhal.UnsupportedTypeError, match=r"node 'pool' \(AveragePool, opset 17\): input 0 \('X'\) "
                                                          r"has element type bool"):
        _run(model, {"x": np.ones((1, 1, 4), bool)})


@pytest.mark.parametrize("dims, data, match", [
    ([3], np.ones(2, np.float32).tobytes(), "holds 8 bytes of raw data; its dims \\[3\\] need 12"),
    ([-1], b"", "negative dims"),
])
def test_initializer_data_must_match_its_dims(dims, data, match):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=dims, raw_data=data)
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_f("x", [3])], [_f("y", [3])], [w])
    with pytest.raises(nnhal.ModelError, match=match):
        nnhal.Session(model)


@pytest.mark.parametrize("code", [999, 16])
def test_an_unknown_or_unsupported_element_type_is_typed(code):
    model = _model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=TensorProto.FLOAT)],
                   [_f("x", [2])], [_f("y", [2])])
    model.graph.node[0].attribute[0].i = code
    with pytest.raises(nnhal.ModelError, match=r"node 'cast' \(Cast, opset 17\)"):
        nnhal.Session(model)


def test_layer_normalization_scale_must_fit_the_normalized_shape():
    scale = numpy_helper.from_array(np.ones(3, np.float32), "s")
    model = _model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")],
                   [_f("x", [2, 5])], [_f("y", [2, 5])], [scale])
    with pytest.raises(nnhal.ShapeError, match=r"node 'ln' \(LayerNormalization, opset 17\): shapes \[\(3,\), "
                                               r"\(5,\)\] do not "
                                               r"broadcast"):
        _run(model, {"x": np.ones((2, 5), np.float32)})


def test_a_kernel_failing_on_run_time_shapes_reports_the_prototype_error():
    # the InstanceNormalization scale is sliced to a length given as an input: known only at run time
    full = numpy_helper.from_array(np.ones(8, np.float32), "full")
    zero = numpy_helper.from_array(np.zeros(1, np.int64), "zero")
    model = _model([helper.make_node("Slice", ["full", "zero", "n"], ["s"], name="cut"),
                    helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="inorm")],
                   [_f("x", [1, 2, 4]), _f("n", [1], TensorProto.INT64), _f("b", [2])], [_f("y", [1, 2, 4])],
                   [full, zero])
    feeds = {"x": np.ones((1, 2, 4), np.float32), "n": np.array([3]), "b": np.ones(2, np.float32)}
    with pytest.raises(nnhal.ShapeError, match=r"node 'inorm' \(InstanceNormalization, opset 17\): scale has shape "
                                               r"\(3,\); expected \(2,\)") as info:
        _run(model, feeds)
    assert isinstance(info.value.__cause__, ValueError)      # the kernel's own failure, kept as the cause
    np.testing.assert_allclose(_run(model, {**feeds, "n": np.array([2])})[0], np.ones((1, 2, 4)))


def test_a_string_that_is_no_number_names_itself():
    model = _model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=TensorProto.FLOAT)],
                   [_f("x", [2], TensorProto.STRING)], [_f("y", [2])])
    with pytest.raises(nnhal.DeviceError, match="cannot cast the string 'abc' to float32"):
        _run(model, {"x": np.array(["1.5", "abc"], dtype=object)})
