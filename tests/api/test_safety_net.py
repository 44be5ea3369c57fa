"""The public API's last safety net: an exception nnhal did not foresee leaves as an InternalError naming
the call (chained to the original), a MemoryError as a LimitError."""
from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import register_device, unregister_device


def _device(name: str, failure: BaseException) -> Device:
    """A device claiming Relu whose evaluation hook fails with ``failure`` (a device author's bug)."""

    def describe(device):
        return Description(frozenset({"Relu"}), ("fp32",))

    def evaluation(device, cand):
        raise failure

    def run(device, sg):
        raise AssertionError("never placed")

    return Device(name=name, interface=Interface(run=run),
                  allocator=Allocator(describe=describe, evaluation=evaluation))


@pytest.mark.parametrize("failure, error, match", [
    (KeyError("no such key"), nnhal.InternalError, r"prerun_graph failed unexpectedly \(KeyError"),
    (MemoryError("out of memory"), nnhal.LimitError, r"prerun ran out of memory during planning .*: out of memory"),
])
def test_an_unforeseen_exception_leaves_typed_and_chained(relu_add_model, failure, error, match):
    register_device(_device("faulty", failure))
    try:
        ctx = nnhal.create_context("net", devices=["faulty", "cpu"])
        g = nnhal.create_graph(ctx, "onnx", relu_add_model)
        nnhal.set_graph_input(g, "x", np.ones((2, 4), np.float32))
        with pytest.raises(error, match=match) as info:
            nnhal.prerun_graph(g)
        assert info.value.__cause__ is failure
        nnhal.destroy_graph(g)
    finally:
        unregister_device("faulty")


@pytest.mark.parametrize("failure, error", [
    (KeyError("no such key"), nnhal.InternalError),
    (MemoryError("out of memory"), nnhal.LimitError),
    (nnhal.InputError("a typed error"), nnhal.InputError),
    (KeyboardInterrupt(), KeyboardInterrupt),
])
def test_a_run_passes_typed_errors_and_wraps_the_rest(relu_add_model, monkeypatch, failure, error):
    with nnhal.Session(relu_add_model, devices=["cpu"]) as s:
        x = np.ones((2, 4), np.float32)
        expected = s.run({"x": x})

        def failing(feeds):
            raise failure

        monkeypatch.setattr(s.graph.prepared, "begin", failing)     # inside the run, its read lock held
        with pytest.raises(error) as info:
            s.run({"x": x})
        assert info.value is failure if error is type(failure) else info.value.__cause__ is failure
        monkeypatch.undo()
        for a, b in zip(s.run({"x": x}), expected):       # the failed run left the graph usable
            np.testing.assert_array_equal(a, b)


def test_a_failing_shape_check_releases_the_read_lock(relu_add_model, monkeypatch):
    """The check that the graph is prepared for these inputs runs with the read lock held: when it fails the
    lock is released, so the session still runs and closes (a leaked read lock makes close() wait forever)."""
    import threading

    from nnhal import api

    s = nnhal.Session(relu_add_model, devices=["cpu"])
    x = np.ones((2, 4), np.float32)
    expected = s.run({"x": x})

    def failing(g, arrays):
        raise KeyError("shape table")

    monkeypatch.setattr(api, "_prepared_for", failing)
    with pytest.raises(nnhal.InternalError):
        s.run({"x": x})
    monkeypatch.undo()
    for a, b in zip(s.run({"x": x}), expected):
        np.testing.assert_array_equal(a, b)
    closer = threading.Thread(target=s.close, daemon=True)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive(), "close() waits on a read lock the failed run kept"
