"""Helpers shared by the integer plan tests: a one-input model x [2, 5, k] from its nodes, and a run of it with one
of the cpu plan's passes switched off (to compare a fusion's plan with the plan without it)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import plan


def model_of(nodes: list, inits: dict, outputs: list[str], k: int, opset: int, rng: np.random.Generator):
    """(the model of ``nodes`` on input x [2, 5, k] with constants ``inits`` and float32 ``outputs``, an x drawn
    from ``rng``)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 5, k))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("ai.nnhal", 1)],
                              ir_version=9)
    return model, (rng.standard_normal((2, 5, k)) * 3).astype(np.float32)


def run_without(model, x: np.ndarray, monkeypatch, skipped: str | None = None):
    """(outputs, plan steps) of ``model`` on the cpu device, the plan pass ``plan.<skipped>`` made a no-op when
    given."""
    with monkeypatch.context() as patch:
        if skipped:
            patch.setattr(plan, skipped, lambda chosen, external: chosen)
        session = nnhal.Session(model, devices=["cpu"])
        outs = session.run({"x": x})
    steps = [st for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]
    return outs, steps


def assert_left_alone(model, x: np.ndarray, monkeypatch, skipped: str, op: str, suffix: str) -> None:
    """The pass ``plan.<skipped>`` leaves ``model`` as it was: the ``op`` step still there, no kernel named with
    ``suffix``, the outputs equal to the plan without the pass."""
    got, steps = run_without(model, x, monkeypatch)
    want, _ = run_without(model, x, monkeypatch, skipped)
    assert op in [st.node.op_type for st in steps]
    assert not any(st.kernel_name.endswith(suffix) for st in steps)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
