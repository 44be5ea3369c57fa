"""The openvino device on small models: options, placement from OpenVINO's query, zero-copy boundaries and
output ownership, a node pinned to the CPU mid-model, precisions (f32 exact, f16/bf16, QDQ int8), the
model cache, the profile hook, and that every compiled subgraph is released."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.device.manager import find_device

RNG = np.random.default_rng(0)
W = (RNG.standard_normal((8, 3, 3, 3)) / 5).astype(np.float32)
B = RNG.standard_normal(8).astype(np.float32)
X = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
# fp32 on two runtimes: the summation order differs; 27-term dot products of O(1) values
FP32 = {"rtol": 1e-5, "atol": 1e-5}


def conv_model(opset: int = 13) -> onnx.ModelProto:
    """Conv -> Relu -> Sin -> MaxPool -> Flatten; Sin is what the tests pin to the CPU."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Sin", ["r"], ["s"], name="sin"),
             helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["y"], name="flat")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", 1, None)],
                              [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def reference(model: onnx.ModelProto, x: np.ndarray = X) -> np.ndarray:
    with nnhal.Session(model, devices=["cpu"]) as s:
        return s.run({"x": x})[0]


def state(device):
    return device.privacy


def test_options_are_typed(openvino):
    from nnhal.device.openvino.openvino_device import OpenvinoOptions

    assert OpenvinoOptions().target == "CPU"
    with pytest.raises(ValueError, match="target must be one of CPU, GPU, NPU, AUTO"):
        OpenvinoOptions(target="TPU")
    with pytest.raises(ValueError, match="hint must be one of latency, throughput"):
        OpenvinoOptions(hint="fast")
    with pytest.raises(ValueError, match="threads"):
        OpenvinoOptions(threads=-1)
    with pytest.raises(nnhal.NnhalError, match="hint"):
        nnhal.Session(conv_model(), devices=["openvino", "cpu"], device_options={"openvino": {"hint": "fast"}})


def test_fp32_is_exact_and_every_node_runs_on_openvino(openvino):
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"]) as s:
        got = s.run({"x": X})[0]
        assert {d.device for d in s.placement.values()} == {"openvino"}
        assert [sg.precision for sg in s.subgraphs] == ["fp32"]
    np.testing.assert_allclose(got, reference(conv_model()), **FP32)


def test_a_node_pinned_to_the_cpu_mid_model_with_its_boundaries_reported(openvino):
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"], pins={"sin": "cpu"}) as s:
        got = s.run({"x": X})[0]
        report = s.report()
    np.testing.assert_allclose(got, reference(conv_model()), **FP32)
    assert [sg.device for sg in report.subgraphs] == ["openvino", "cpu", "openvino"]
    crossing = {b.tensor: b for b in report.boundaries}
    assert crossing["r"].producer == "subgraph #0 (openvino)" and crossing["r"].consumer == "subgraph #1 (cpu)"
    assert crossing["s"].producer == "subgraph #1 (cpu)" and crossing["s"].consumer == "subgraph #2 (openvino)"
    # OpenVINO on the CPU reads and writes numpy memory: no boundary costs a copy
    assert {b.transfer for b in report.boundaries} == {"zero-copy"} and sum(b.copies for b in report.boundaries) == 0
    assert "zero-copy" in str(report)


def test_outputs_are_written_in_place_and_never_overwritten_by_a_later_run(openvino):
    record = find_device("openvino")
    before = state(record).copied_bytes
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"]) as s:
        first = s.run({"x": X})[0]
        kept = first.copy()
        s.run({"x": -X})
        assert np.array_equal(first, kept)
    assert state(record).copied_bytes == before       # float32, C-contiguous: nothing was copied


def test_an_input_openvino_cannot_read_in_place_is_copied_and_counted(openvino):
    record = find_device("openvino")
    nodes = [helper.make_node("Cast", ["x"], ["c"], name="cast", to=1),
             helper.make_node("Abs", ["c"], ["y"], name="abs")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.arange(32, dtype=np.float32).reshape(4, 8)[:, ::2]       # a strided view
    before = state(record).copied_bytes
    with nnhal.Session(model, devices=["openvino", "cpu"]) as s:
        y = s.run({"x": x})[0]
    np.testing.assert_array_equal(y, np.abs(x))
    # the core may make the feed contiguous itself; either way at most one copy of 64 bytes was made
    assert state(record).copied_bytes - before in (0, 64)


def test_placement_passes_openvinos_reason_on(openvino):
    # NOTE: Celu is in nnhal's CPU kernels; whatever OpenVINO says of an op, the verdict and its reason
    # must come from OpenVINO's query, and the report must carry it
    from nnhal.device.device import Candidate
    from nnhal.device.openvino.openvino_device import openvino_evaluation
    from nnhal.graph.node import Node
    from nnhal.operator.base import Info

    f32 = np.dtype(np.float32)
    ok = openvino_evaluation(openvino, Candidate(Node("r", "Relu", ["x"], ["y"], opset=14, version=14),
                                                 [Info(f32, (2, 3))], [Info(f32, (2, 3))], "fp32"))
    assert ok.ok
    # a string tensor has no OpenVINO element type: refused with the frontend's or the exporter's words
    bad = openvino_evaluation(openvino, Candidate(
        Node("s", "StringNormalizer", ["x"], ["y"], {"case_change_action": "LOWER"}, opset=10, version=10),
        [Info(np.dtype(object), (3,))], [Info(np.dtype(object), (3,))], "fp32"))
    assert not bad.ok and "OpenVINO" in bad.reason


def test_the_query_cache_asks_openvino_once_per_form(openvino):
    cache = state(openvino).queries
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"]) as s:
        s.run({"x": X})
    asked = cache.queries
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"]) as s:
        s.run({"x": X})
    assert cache.queries == asked


def test_a_missing_target_falls_back_with_the_reason(openvino):
    absent = next((t for t in ("NPU", "GPU") if not any(a.startswith(t) for a in state(openvino).targets)), None)
    if absent is None:
        pytest.skip(f"this machine has every OpenVINO target ({state(openvino).targets})")
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"], device_options={"openvino": {"target": absent}}) as s:
        got = s.run({"x": X})[0]
        why = " ".join(f.describe() for f in s.fallbacks)
    assert f"OpenVINO has no {absent} device here" in why
    np.testing.assert_allclose(got, reference(conv_model()), **FP32)


def test_fp16_computes_in_the_targets_16_bit_precision(openvino):
    if "fp16" not in openvino.describe().precisions:
        pytest.skip(f"this CPU has no 16-bit float precision in OpenVINO: {openvino.describe().summary}")
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"], precision="fp16") as s:
        got = s.run({"x": X})[0]
        assert [sg.precision for sg in s.subgraphs] == ["fp16"]
    want = reference(conv_model())
    # bf16 (the looser of f16 and bf16) keeps 8 significant bits: each of the 27 products and the sum are
    # rounded to 2^-8 relative; the bound is 2^-8 of the sum of |w x| terms plus the rounding of the result
    bound = 2.0 ** -7 * 28 * float(np.abs(W).max()) * float(np.abs(X).max()) + 2.0 ** -8 * np.abs(want)
    assert np.all(np.abs(got - want) <= bound)
    assert np.abs(got - want).max() > 0      # really computed in 16 bits, not f32


def test_int8_runs_qdq_and_stays_within_the_quantization_steps(openvino):
    model = conv_model()
    feeds = [{"x": X}] + [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
    table = nnhal.calibrate(model, feeds, method="minmax", progress=False)
    with nnhal.Session(model, devices=["openvino", "cpu"], precision="uint8", calibration=table) as s:
        got = s.run({"x": X})[0]
        stats = [sg.stats for sg in s.subgraphs if sg.device == "openvino"]
    assert stats and stats[0].get("openvino_qdq", 0) >= 1
    # 127, or 63 where OpenVINO's kernels saturate u8 x s8 pair sums at 16 bits (x86 without VNNI)
    levels = stats[0]["openvino_weight_levels"]
    assert levels in (63, 127)
    want = reference(model)
    # X is among the calibration feeds (min-max: no clipping). The conv reads x rounded to half a uint8
    # step of its range, and each weight rounded to half a step of its channel's peak (peak / levels); the
    # error reaches Relu / Sin / MaxPool, all 1-Lipschitz, undiminished
    lo, hi = min(0.0, min(float(f["x"].min()) for f in feeds)), max(0.0, max(float(f["x"].max()) for f in feeds))
    x_step = (hi - lo) / 255.0
    per_channel = np.abs(W).reshape(8, -1)
    bound = x_step / 2 * per_channel.sum(axis=1).max() + \
        (per_channel.max(axis=1) / levels / 2).max() * per_channel.shape[1] * float(np.abs(X).max())
    assert np.abs(got - want).max() <= bound
    assert np.abs(got - want).max() > 0     # integer kernels, not float


def test_weight_levels_are_exact_on_this_cpu(openvino):
    # the levels the device picked multiply exactly: u8 255 against s8 +-levels over 8 channels, summed in
    # pairs, is what integer arithmetic says (a saturating kernel fed 127 gives 4 x 32767 instead)
    from nnhal.device.openvino import runtime

    levels = runtime.weight_levels()
    model = runtime._probe_model()
    w = np.full((1, runtime.PROBE_CHANNELS, 1, 1), levels, np.int8)
    w[0, ::3] = -levels
    for i, t in enumerate(model.graph.initializer):
        if t.name == "wq":
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(w, "wq"))
    x = np.full((1, runtime.PROBE_CHANNELS, 2, 2), 255.0, np.float32)
    core = openvino.privacy.core
    got = core.compile_model(runtime.read(core, model), "CPU")({"x": x})[0]
    assert np.all(np.asarray(got) == 255.0 * float(w.astype(np.int64).sum()))


def test_model_cache_under_the_cache_dir(openvino, tmp_path):
    cache = tmp_path / "cache"
    options = {"openvino": {"cache_dir": str(cache)}}
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"], device_options=options) as s:
        s.run({"x": X})
        assert not s.fallbacks
    blobs = list((cache / "openvino").rglob("*.blob"))
    assert blobs, f"no OpenVINO cache entry under {cache}"
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    options = {"openvino": {"cache_dir": str(open_dir)}}
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"], device_options=options) as s:
        s.run({"x": X})
        assert "writable by group or others" in " ".join(f.describe() for f in s.fallbacks)


def test_profile_names_nnhal_nodes(openvino):
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"]) as s:
        profile = s.profile({"x": X}, runs=2)
        got = s.run({"x": X})[0]
    names = {n.node for n in profile.nodes if n.device == "openvino"}
    assert names & {"conv", "relu", "pool", "flat", "c", "r"}, names
    assert all(n.ms >= 0 for n in profile.nodes)
    np.testing.assert_allclose(got, reference(conv_model()), **FP32)    # recompiled without counters


def test_every_compiled_subgraph_is_released(openvino):
    from nnhal.device.openvino.openvino_device import live_graphs

    before = live_graphs(openvino)
    with nnhal.Session(conv_model(), devices=["openvino", "cpu"], pins={"sin": "cpu"}) as s:
        s.run({"x": X})
        assert live_graphs(openvino) == before + 2
    assert live_graphs(openvino) == before
