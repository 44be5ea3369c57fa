"""mini passes nnhal's device kit: conformance on its ops, hook order, boundaries, fallback."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal import testing

DEVICE = "mini"


@pytest.fixture(scope="session", autouse=True)
def _nnhal():
    nnhal.init()
    yield
    nnhal.release()


def test_mini_is_registered_from_its_entry_point():
    status = next(s for s in nnhal.api.device_status() if s.name == DEVICE)
    assert status.available, status.reason
    assert status.origin.startswith("entry point") and status.api == (1, 0)


@pytest.mark.parametrize("constant_weights", [False, True], ids=["weights-as-inputs", "constant-weights"])
@pytest.mark.parametrize("case", testing.conformance_cases(DEVICE), ids=lambda c: c.name)
def test_conformance(case, constant_weights):
    testing.check_case(DEVICE, case, constant_weights=constant_weights)


def test_hook_order():
    testing.check_hook_order(DEVICE)


def test_boundaries():
    testing.check_boundaries(DEVICE)


def test_fallback():
    testing.check_fallback(DEVICE)


def test_concurrent_runs():
    testing.check_concurrent_runs(DEVICE)


def test_output_ownership():
    testing.check_output_ownership(DEVICE)


def test_lifetime():
    testing.check_lifetime(DEVICE)


def test_api_version():
    testing.check_api_version(DEVICE)


def test_random_graphs():
    testing.check_random_graphs(DEVICE, seeds=range(10))


def test_session_runs_matmul_relu_on_mini():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="r")]
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor("w", TensorProto.FLOAT, [4, 3], w.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    with nnhal.Session(model, devices=[DEVICE]) as s:
        y = s.run({"x": x})[0]
        assert {d.device for d in s.placement.values()} == {DEVICE}
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-6)
