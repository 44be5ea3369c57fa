"""The C-style lifecycle and Session, including every misuse a user can make."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import nnhal
from tests.conftest import make_model, vinfo

X = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], dtype=np.float32)
B = np.linspace(-1, 1, 4, dtype=np.float32)


def expected(x):
    return np.maximum(np.maximum(x, 0) + B, 0)


def test_c_style_lifecycle(relu_add_model):
    ctx = nnhal.create_context("app", devices=["cpu"])
    g = nnhal.create_graph(ctx, "onnx", relu_add_model.SerializeToString())
    nnhal.set_graph_input(g, "x", X)
    nnhal.prerun_graph(g, nnhal.Options(num_thread=1))
    nnhal.run_graph(g, block=True)
    np.testing.assert_allclose(nnhal.get_graph_output(g, 0), expected(X))
    np.testing.assert_allclose(nnhal.get_graph_output(g, "z"), expected(X))
    nnhal.set_graph_input(g, 0, -X)
    nnhal.run_graph(g, block=False)
    assert nnhal.wait_graph(g, timeout=10)
    np.testing.assert_allclose(nnhal.get_graph_output(g, "z"), expected(-X))
    nnhal.postrun_graph(g)
    nnhal.prerun_graph(g)
    nnhal.run_graph(g)
    np.testing.assert_allclose(nnhal.get_graph_output(g, "z"), expected(-X))
    nnhal.destroy_graph(g)


def test_model_from_path(tmp_path, relu_add_model):
    path = tmp_path / "m.onnx"
    path.write_bytes(relu_add_model.SerializeToString())
    with nnhal.Session(str(path)) as s:
        np.testing.assert_allclose(s.run([X])[0], expected(X))


def test_outputs_survive_the_next_run(relu_add_model):
    with nnhal.Session(relu_add_model) as s:
        first = s.run({"x": X})[0].copy()
        kept = s.run({"x": X})[0]
        s.run({"x": -X})
        np.testing.assert_array_equal(kept, first)


def test_new_input_shape_reprepares():
    model = make_model([nnhal_node("Relu", ["x"], ["y"])], [vinfo("x", ["n", 3])], [vinfo("y", ["n", 3])])
    with nnhal.Session(model) as s:
        for n in (1, 4, 2):
            x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 4
            np.testing.assert_array_equal(s.run({"x": x})[0], np.maximum(x, 0))


def nnhal_node(op, ins, outs, **attrs):
    from onnx import helper
    return helper.make_node(op, ins, outs, **attrs)


def test_wrong_input_name_lists_the_names(relu_add_model):
    with nnhal.Session(relu_add_model) as s:
        with pytest.raises(nnhal.InputError, match=r"no input named 'y'.*\['x'\]"):
            s.run({"y": X})


def test_wrong_dtype_and_shape(relu_add_model):
    g = nnhal.create_graph(nnhal.create_context(), "onnx", relu_add_model)
    with pytest.raises(nnhal.InputError, match="expects dtype float32, got float64"):
        nnhal.set_graph_input(g, "x", X.astype(np.float64))
    with pytest.raises(nnhal.InputError, match=r"expects shape \[2x4\], got \[4, 2\]"):
        nnhal.set_graph_input(g, "x", X.reshape(4, 2))
    with pytest.raises(nnhal.InputError, match="index 3 is out of range"):
        nnhal.set_graph_input(g, 3, X)


def test_run_before_prerun_and_output_before_run(relu_add_model):
    g = nnhal.create_graph(nnhal.create_context(), "onnx", relu_add_model)
    nnhal.set_graph_input(g, "x", X)
    with pytest.raises(nnhal.StateError, match="before prerun_graph"):
        nnhal.run_graph(g)
    nnhal.prerun_graph(g)
    with pytest.raises(nnhal.StateError, match="no outputs yet"):
        nnhal.get_graph_output(g, 0)


def test_missing_input(relu_add_model):
    g = nnhal.create_graph(nnhal.create_context(), "onnx", relu_add_model)
    nnhal.prerun_graph(g)
    with pytest.raises(nnhal.InputError, match=r"inputs not set: \['x'\]"):
        nnhal.run_graph(g)


def test_use_after_destroy(relu_add_model):
    g = nnhal.create_graph(nnhal.create_context(), "onnx", relu_add_model)
    nnhal.destroy_graph(g)
    for call in (lambda: nnhal.set_graph_input(g, "x", X), lambda: nnhal.prerun_graph(g),
                 lambda: nnhal.run_graph(g), lambda: nnhal.get_graph_output(g, 0), lambda: nnhal.destroy_graph(g)):
        with pytest.raises(nnhal.StateError, match="destroyed"):
            call()


def test_unknown_device_suggests_the_closest():
    with pytest.raises(nnhal.DeviceError, match=r"no device named 'cpuu'.*did you mean 'cpu'"):
        nnhal.create_context("x", devices=["cpuu"])


def test_bad_options():
    with pytest.raises(nnhal.OptionsError, match="precision must be one of"):
        nnhal.Options(precision="fp64")
    with pytest.raises(nnhal.OptionsError, match="num_thread"):
        nnhal.Options(num_thread=-1)
    with pytest.raises(nnhal.DeviceError, match="takes no options"):
        nnhal.create_context("x", devices=["cpu"], device_options={"cpu": {"speed": 1}})


def test_bad_model_bytes_and_path(tmp_path):
    with pytest.raises(nnhal.ModelError, match="cannot read ONNX model"):
        nnhal.Session(b"not a model")
    with pytest.raises(nnhal.ModelError, match="does not exist"):
        nnhal.Session(str(tmp_path / "missing.onnx"))
    with pytest.raises(nnhal.ModelError, match="format 'tflite'"):
        nnhal.create_graph(nnhal.create_context(), "tflite", b"")


def test_every_unsupported_op_is_listed_at_once():
    from onnx import helper
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Bernoulli", ["a"], ["b"], name="first_bernoulli"),
             helper.make_node("Bernoulli", ["b"], ["c"], name="second_bernoulli"),
             helper.make_node("StringNormalizer", ["s"], ["t"], name="strings")]
    from onnx import TensorProto
    model = make_model(nodes, [vinfo("x", [2]), vinfo("s", [2], TensorProto.STRING)],
                       [vinfo("c", [2]), vinfo("t", [2], TensorProto.STRING)])
    with pytest.raises(nnhal.UnsupportedOperatorError) as info:
        nnhal.Session(model)
    message = str(info.value)
    assert "Bernoulli (opset 17, first at node 'first_bernoulli')" in message
    assert "StringNormalizer (opset 17, first at node 'strings')" in message
    assert len(info.value.entries) == 2


def test_sessions_in_threads(relu_add_model):
    errors = []

    def work(sign):
        try:
            with nnhal.Session(relu_add_model) as s:
                for _ in range(20):
                    np.testing.assert_allclose(s.run({"x": sign * X})[0], expected(sign * X))
        except Exception as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, -1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
