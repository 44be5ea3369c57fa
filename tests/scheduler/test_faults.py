"""Faults leak nothing: failed preruns release every allocation, cleanup runs every hook, a device
that writes no output is a DeviceError (and falls back when not strict)."""
from __future__ import annotations

import gc
import resource
from importlib import resources

import numpy as np
import onnx
import pytest
from onnx import helper

import nnhal
from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import find_device, register_device, unregister_device
from tests.conftest import make_model, vinfo
from tests.scheduler.test_fallback_and_async import EXPECTED, X, _compute, chain_model


def counting_device(name: str, fail: str | None = None, ledger: dict | None = None) -> Device:
    """Relu/Add in numpy; allocate reserves 1 unit per subgraph in ``ledger``, release gives it back;
    ``fail`` names the hook that raises ('pre_run', 'run', 'post_run', 'release_graph', 'no_output')."""
    ledger = ledger if ledger is not None else {}

    def allocate(device, sg):
        ledger["held"] = ledger.get("held", 0) + 1

    def release(device, sg):
        ledger["held"] -= 1
        if fail == "release":
            raise RuntimeError("injected release fault")

    def pre_run(device, sg, options):
        sg.device_graph = {"compiled": True}
        if fail == "pre_run":
            raise RuntimeError("injected pre_run fault")

    def run(device, sg):
        if fail == "run":
            raise RuntimeError("injected run fault")
        if fail != "no_output":
            _compute(sg)

    def post_run(device, sg):
        if fail == "post_run":
            raise RuntimeError("injected post_run fault")

    def release_graph(device, graph):
        ledger["graphs_released"] = ledger.get("graphs_released", 0) + 1
        if fail == "release_graph":
            raise RuntimeError("injected release_graph fault")

    return Device(name, Interface(run=run, pre_run=pre_run, post_run=post_run, release_graph=release_graph),
                  Allocator(describe=lambda d: Description(frozenset({"Relu", "Add"}), ("fp32",)),
                            allocate=allocate, release=release))


@pytest.fixture
def device_with(request):
    made = []

    def make(fail=None):
        ledger: dict = {}
        register_device(counting_device("counting", fail, ledger))
        made.append("counting")
        return ledger

    yield make
    for name in made:
        unregister_device(name)


def two_subgraph_model():
    """relu -> sigmoid (cpu only) -> add: the counting device gets two subgraphs."""
    return chain_model()


@pytest.mark.parametrize("strict", [True, False])
def test_a_failed_prerun_releases_every_allocation(device_with, strict):
    ledger = device_with("pre_run")
    devices = ["counting"] if strict else ["counting", "cpu"]
    model = make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                        helper.make_node("Add", ["a", "a"], ["y"], name="add")], [vinfo("x", [8])], [vinfo("y", [8])])
    for _ in range(3):
        s = nnhal.Session(model, devices=devices, strict=strict)
        if strict:
            with pytest.raises(nnhal.DeviceError, match="injected pre_run fault"):
                s.run({"x": X})
        else:
            np.testing.assert_allclose(s.run({"x": X})[0], 2 * np.maximum(X, 0))
        s.close()
        assert ledger["held"] == 0


def test_strict_prerun_failure_releases_earlier_subgraphs_too(device_with):
    """The second subgraph's pre_run fails: the first one's allocation and compiled graph go as well."""
    ledger = device_with()
    from nnhal.device.manager import find_device as find
    dev = find("counting")
    calls = {"n": 0}
    original = dev.interface.pre_run

    def second_fails(device, sg, options):
        calls["n"] += 1
        original(device, sg, options)
        if calls["n"] == 2:
            raise RuntimeError("injected second pre_run fault")

    import dataclasses
    dev.interface = dataclasses.replace(dev.interface, pre_run=second_fails)
    with nnhal.Session(chain_model(), devices=["counting", "cpu"], strict=True,
                       pins={"sigmoid": "cpu"}) as s:
        with pytest.raises(nnhal.DeviceError, match="injected second pre_run fault"):
            s.run({"x": X})
    assert ledger["held"] == 0
    assert ledger["graphs_released"] == 2


@pytest.mark.parametrize("hook", ["post_run", "release_graph", "release"])
def test_cleanup_runs_every_hook_then_raises_one_typed_error(device_with, hook):
    ledger = device_with(hook)
    s = nnhal.Session(chain_model(), devices=["counting", "cpu"], pins={"sigmoid": "cpu"})
    np.testing.assert_allclose(s.run({"x": X})[0], EXPECTED, rtol=1e-6)
    with pytest.raises(nnhal.DeviceError, match=f"device 'counting' hook .*{hook} raised RuntimeError"):
        s.close()
    assert ledger["held"] == 0                     # both subgraphs released despite the failures
    assert ledger["graphs_released"] == 2
    assert s.graph.state is nnhal.api.GraphState.DESTROYED
    s.close()                                      # closing twice is harmless


def test_missing_output_falls_back_or_raises(device_with):
    device_with("no_output")
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vinfo("x", [8])], [vinfo("y", [8])])
    with nnhal.Session(model, devices=["counting", "cpu"]) as s:
        np.testing.assert_allclose(s.run({"x": X})[0], np.maximum(X, 0))
        assert [f.stage for f in s.fallbacks] == ["run"]
        assert "wrote no value for output(s) ['y']" in s.fallbacks[0].error
    with nnhal.Session(model, devices=["counting"], strict=True) as s:
        with pytest.raises(nnhal.DeviceError, match=r"device 'counting': its run wrote no value for output\(s\) "
                                                    r"\['y'\]"):
            s.run({"x": X})


def _digits():
    path = str(resources.files("nnhal.data").joinpath("digits_cnn.onnx"))
    return path, onnx.load(path).graph.input[0].name


def test_twenty_failed_strict_vnpu_preruns_leak_no_device_memory():
    """vnpu gets two subgraphs (42,688 + 13,162 bytes at batch 16); with 50,000 bytes of device memory the
    second allocation fails. Twenty such strict preruns, then a Session with room for both: vnpu still
    takes its nodes, so nothing of the failed ones stayed reserved."""
    path, name = _digits()
    x = np.random.default_rng(0).random((16, 1, 8, 8), dtype=np.float32)
    small = {"vnpu": {"memory_mb": 50_000 / (1 << 20)}}
    for _ in range(20):
        with nnhal.Session(path, devices=["vnpu", "cpu"], precision="uint8", strict=True, device_options=small) as s:
            with pytest.raises(nnhal.DeviceError, match="out of device memory"):
                s.run({name: x})
    assert find_device("vnpu").privacy.used_bytes == 0
    room = {"vnpu": {"memory_mb": 60_000 / (1 << 20)}}
    with nnhal.Session(path, devices=["vnpu", "cpu"], precision="uint8", strict=True, device_options=room) as s:
        s.run({name: x})
        assert [sg.device for sg in s.subgraphs].count("vnpu") == 2 and not s.fallbacks
    assert find_device("vnpu").privacy.used_bytes == 0


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def test_create_run_close_cycles_do_not_grow_memory():
    path, name = _digits()
    x = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    for _ in range(20):                 # warm caches (kernels, numpy, imports)
        with nnhal.Session(path) as s:
            s.run({name: x})
    gc.collect()
    before = _rss_mb()
    for _ in range(300):
        with nnhal.Session(path) as s:
            s.run({name: x})
    gc.collect()
    assert _rss_mb() - before < 50


def test_a_run_that_fails_on_its_values_leaves_the_session_usable():
    """A kernel that fails on this run's values (an index out of range) where no fallback remains raises,
    and the subgraph stays prepared: the next run with good values runs (it was released before, and every
    later run failed with AttributeError on the missing plan)."""
    table = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32) * 2, "table")
    model = make_model([helper.make_node("Cast", ["x"], ["i"], to=onnx.TensorProto.INT64),
                        helper.make_node("Gather", ["table", "i"], ["y"], axis=0)],
                       [vinfo("x", [2])], [vinfo("y", [2])], [table])
    with nnhal.Session(model, devices=["cpu"]) as s:
        np.testing.assert_array_equal(s.run({"x": np.array([1, 3], np.float32)})[0], [2, 6])
        with pytest.raises(nnhal.DeviceError, match="out of range"):
            s.run({"x": np.array([1, 9], np.float32)})
        np.testing.assert_array_equal(s.run({"x": np.array([3, 0], np.float32)})[0], [6, 0])
