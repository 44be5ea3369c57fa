"""The kit fails each deliberately broken device (tests/testing/broken.py) with a message naming the problem,
and passes the correct ones (issue 25's table, plus a wrong-shape output)."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import nnhal
from nnhal import testing
from nnhal.conformance.report import per_op
from nnhal.conformance.runner import FALLBACK, PASS, run_suite
from nnhal.device.manager import register_device, unregister_device
from nnhal.errors import RegistryError
from tests.testing import broken


@pytest.fixture
def registered():
    """register(factory, name, api=...) -> name; every device registered is unregistered afterwards."""
    names: list[str] = []

    def register(factory, name: str, **kwargs) -> str:
        register_device(factory(name), **kwargs)
        names.append(name)
        return name

    yield register
    for name in reversed(names):
        unregister_device(name)


def _case(device: str, name: str):
    return next(c for c in testing.conformance_cases(device) if c.name == name)


def test_the_correct_device_passes_every_check(registered):
    dev = registered(broken.good, "kitok")
    testing.check_case(dev, _case(dev, "test_relu"))
    testing.check_case(dev, _case(dev, "test_conv_with_strides_padding"), constant_weights=True)
    testing.check_hook_order(dev)
    testing.check_boundaries(dev)
    testing.check_fallback(dev)
    testing.check_concurrent_runs(dev)
    testing.check_output_ownership(dev)
    testing.check_lifetime(dev, live=lambda d: d.privacy.compiled)
    testing.check_api_version(dev)
    testing.check_random_graphs(dev, range(3))


def test_outputs_times_1_001_fail_conformance_boundaries_and_random_graphs(registered):
    dev = registered(broken.scaled, "kitscaled")
    for case in ("test_relu", "test_add", "test_mul"):     # ordinary ops: no slack
        with pytest.raises(AssertionError, match=rf"{case} on 'kitscaled' at fp32: wrong: output 0: .* values off"):
            testing.check_case(dev, _case(dev, case))
    with pytest.raises(AssertionError, match="on 'kitscaled' at fp32 differs from the CPU's"):
        testing.check_boundaries(dev)
    with pytest.raises(AssertionError, match=r"(?s)random graph\(s\) differ on 'kitscaled'.*replay\("):
        testing.check_random_graphs(dev, range(3))


def test_reentrant_device_reusing_its_output_arrays_is_caught(registered):
    dev = registered(broken.reused_outputs, "kitreuse")
    with pytest.raises(AssertionError, match="changed during 3 later runs: the device reuses its output buffers"):
        testing.check_output_ownership(dev)
    with pytest.raises(AssertionError, match="share memory|differs from the same input run alone"):
        testing.check_concurrent_runs(dev)


def test_a_device_declaring_its_reused_outputs_is_copied_by_the_core(registered):
    dev = registered(lambda n: broken.reused_outputs(n, declared=True), "kitreuseok")
    testing.check_output_ownership(dev)
    testing.check_concurrent_runs(dev)


def test_shared_input_staging_on_a_reentrant_device_is_caught(registered):
    dev = registered(broken.shared_staging, "kitstaging")
    with pytest.raises(AssertionError, match="differs from the same input run alone"):
        testing.check_concurrent_runs(dev, threads=4, runs=5)


def test_release_graph_that_never_frees_is_caught(registered):
    dev = registered(broken.leaking, "kitleak")
    with pytest.raises(AssertionError, match=r"still alive after release_graph and destroy.*live-object count is 6"):
        testing.check_lifetime(dev, live=lambda d: d.privacy.compiled)


def test_wrong_shape_output_is_a_device_error_naming_the_tensor(registered):
    dev = registered(broken.wrong_shape, "kitshape")
    with pytest.raises(AssertionError, match=r"output '\w+' is float32 \[16\], inference expected float32 \[4, 4\]"):
        testing.check_boundaries(dev)


def test_api_1_0_device_filling_the_1_1_profile_hook(registered, caplog):
    with caplog.at_level(logging.WARNING, logger="nnhal"):
        dev = registered(broken.profiling, "kitapi", api=(1, 0))
    assert "declares device API 1.0 but fills interface.profile (since 1.1)" in caplog.text
    with pytest.raises(AssertionError, match=r"'kitapi' declares device API 1.0 but fills interface.profile"):
        testing.check_api_version(dev)


def test_missing_output_uncompiled_op_and_failing_pre_run_are_caught(registered):
    dev = registered(broken.missing_output, "kitmissing")
    with pytest.raises(AssertionError, match="wrote no value for output"):
        testing.check_boundaries(dev)
    dev = registered(broken.uncompiled_op, "kitnosub")
    with pytest.raises(AssertionError, match="test_sub on 'kitnosub' at fp32: error: .*no kernel for Sub"):
        testing.check_case(dev, _case(dev, "test_sub"))
    dev = registered(broken.failing_pre_run, "kitprerun")
    with pytest.raises(AssertionError, match="failed on the boundary model: .*pre_run.*vendor compiler rejected"):
        testing.check_boundaries(dev)


def test_async_run_without_async_wait_is_refused_at_registration():
    import dataclasses

    device = broken.good("kitasync")
    device = dataclasses.replace(device, interface=dataclasses.replace(device.interface,
                                                                       async_run=device.interface.run))
    with pytest.raises(RegistryError, match="async_run"):
        register_device(device)


def test_constant_weights_mode_runs_the_cases_a_constant_weights_device_declines(registered):
    dev = registered(broken.constant_weights_only, "kitnpu")
    case = _case(dev, "test_conv_with_strides_padding")
    with pytest.raises(pytest.skip.Exception, match="needs constant weights"):
        testing.check_case(dev, case)
    testing.check_case(dev, case, constant_weights=True)
    coverage = testing.weights_coverage(dev, ["Conv", "Gemm"])
    assert coverage["Conv"]["inputs"] == 0 < coverage["Conv"]["constant"] <= coverage["Conv"]["cases"]
    assert coverage["Gemm"]["inputs"] == 0 < coverage["Gemm"]["constant"]


def test_validate_counts_no_conv_pass_for_a_device_that_declines_conv(registered):
    dev = registered(broken.declines_conv, "kitnoconv")
    results = run_suite(dev, "fp32", ops=["Conv", "Relu"], progress=False)
    table = per_op(results)
    assert table["Conv"][PASS] == 0 and table["Conv"][FALLBACK] > 0
    assert table["Relu"][PASS] > 0
    conv = [r for r in results if "Conv" in r.ops]
    assert conv and all(r.status != PASS for r in conv)
    assert all("Conv" in r.fell_back and r.reason.startswith("passed on fallback: ") for r in conv
               if r.status == FALLBACK)


def test_outputs_stay_unchanged_after_later_runs_through_the_public_api(registered):
    dev = registered(lambda n: broken.reused_outputs(n, declared=True), "kitkeep")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with nnhal.Session(model, devices=[dev]) as s:
        first = s.run({"x": np.array([1, 2, 3], np.float32)})[0]
        s.run({"x": np.array([4, 5, 6], np.float32)})
    np.testing.assert_array_equal(first, [1, 2, 3])


def _chain_model():
    from onnx import TensorProto, helper, numpy_helper

    k = numpy_helper.from_array(np.linspace(0.5, 1.5, 12, dtype=np.float32).reshape(3, 4), "k")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Mul", ["a", "k"], ["b"], name="scale"),
             helper.make_node("Add", ["b", "x"], ["c"], name="join"),
             helper.make_node("Sigmoid", ["c"], ["y"], name="last")]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4]) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph(nodes, "chain", info[:1], info[1:], [k]),
                              opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)}


def test_debug_mode_names_the_first_node_that_diverges(registered):
    import dataclasses

    def run(device, sg):
        out = broken.compute(sg)
        wrong = {n.outputs[0] for n in sg.nodes if n.op_type == "Mul"}
        for name in sg.outputs:
            sg.values[name] = out[name] * np.float32(1.001) if name in wrong else out[name]

    model, feeds = _chain_model()
    good = registered(broken.good, "kitdebugok")
    assert testing.first_divergence(model, feeds, good) is None
    bad = registered(lambda n: dataclasses.replace(broken.good(n), interface=dataclasses.replace(
        broken.good(n).interface, run=run)), "kitdebugmul")
    found = testing.first_divergence(model, feeds, bad)
    assert found is not None and (found.node, found.op, found.checked) == ("scale", "Mul", 2)
    assert "node 'scale' (Mul) on 'kitdebugmul' at fp32 diverges from the host reference" in str(found)


@pytest.mark.parametrize("device", ["cpu", "vnpu"])
def test_debug_mode_finds_nothing_on_in_tree_devices(device):
    model, feeds = _chain_model()
    assert testing.first_divergence(model, feeds, device) is None


def test_validate_prints_the_devices_own_per_op_coverage(registered, capsys):
    from nnhal.conformance.runner import main

    dev = registered(broken.declines_conv, "kitnoconvcli")
    assert main(["--device", dev, "--ops", "Conv", "--pattern", "test_conv_with_strides_*", "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    conv = next(line.split() for line in out if line.startswith("Conv "))
    assert conv[1:3] == ["0", "3"]          # pass 0 (run by the device itself), fallback 3
    assert out[-1].startswith("0 passed, 3 passed on fallback (not the device's), 0 wrong")
