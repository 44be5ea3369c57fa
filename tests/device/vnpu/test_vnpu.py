"""The vnpu: integer results bit for bit, off-by-one of the CPU quantized reference, real models split
across vnpu and cpu, options, memory, and the chip's limits in the placement report."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.device.vnpu.reference import check_subgraph
from nnhal.zoo import input_for, resolve
from tests.conftest import make_model, vinfo
from tests.device.vnpu.test_fixedpoint import reference_requantize

RNG = np.random.default_rng(0)


def conv_model(group: int = 1, stride: int = 2) -> onnx.ModelProto:
    c, m = 4, 4 if group > 1 else 6
    w = numpy_helper.from_array((RNG.standard_normal((m, c // group, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((RNG.standard_normal(m) * 0.1).astype(np.float32), "b")
    k = numpy_helper.from_array(RNG.uniform(0.5, 1.5, (1, m, 1, 1)).astype(np.float32), "k")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                              strides=[stride, stride], group=group),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["p"], name="mul"),
             helper.make_node("Add", ["p", "r"], ["s"], name="add"),
             helper.make_node("GlobalAveragePool", ["s"], ["y"], name="gap")]
    return make_model(nodes, [vinfo("x", [1, c, 7, 7])], [vinfo("y", [1, m, 1, 1])], [w, b, k])


def _vnpu_subgraph(session):
    return next(sg for sg in session.subgraphs if sg.device == "vnpu")


@pytest.mark.parametrize("group", [1, 4])
def test_conv_equals_an_integer_reference_bit_for_bit(group):
    x = RNG.standard_normal((1, 4, 7, 7)).astype(np.float32)
    with nnhal.Session(conv_model(group), devices=["vnpu", "cpu"], precision="uint8",
                       device_options={"vnpu": {"trace": True}}) as s:
        s.run({"x": x})
        sg = _vnpu_subgraph(s)
        assert len(sg.nodes) == 5, "the whole model runs on the vnpu"
        conv = sg.device_graph.program.instructions[0]
        assert conv.kind == "conv" and conv.output == "r", "Relu is fused into the convolution"
        trace = sg.stats["trace"]
    p = conv.params
    xq = trace["x"].astype(np.int64)
    wq = p["wq"].astype(np.int64)
    want = np.zeros(trace["r"].shape, np.int64)
    padded = np.pad(xq - p["zx"], [(0, 0), (0, 0), (1, 1), (1, 1)])
    cg = wq.shape[1]
    for m in range(wq.shape[0]):
        g = m // (wq.shape[0] // group)
        for i in range(want.shape[2]):
            for j in range(want.shape[3]):
                window = padded[0, g * cg:(g + 1) * cg, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
                acc = int(np.sum(window * wq[m])) + int(p["bias"][m])
                q = reference_requantize(acc, int(p["m0"][m]), int(p["shift"][m])) + p["zy"]
                want[0, m, i, j] = min(max(q, p["lo"]), p["hi"])
    np.testing.assert_array_equal(trace["r"], want)


def test_every_instruction_is_within_one_step_of_the_cpu_reference():
    x = RNG.standard_normal((1, 4, 7, 7)).astype(np.float32)
    with nnhal.Session(conv_model(1, stride=1), devices=["vnpu", "cpu"], precision="uint8",
                       device_options={"vnpu": {"trace": True}}) as s:
        s.run({"x": x})
        checks = check_subgraph(_vnpu_subgraph(s))
    assert [c.instruction.split(":")[0] for c in checks] == ["conv", "mul", "add", "avg_pool"]
    assert max(c.max_diff for c in checks) <= 1


def _with_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"][-1]
    model.graph.output.append(helper.make_tensor_value_info(softmax.input[0], onnx.TensorProto.FLOAT, None))
    return model


@pytest.mark.parametrize("name", ["resnet50", "inception_v1"])
def test_zoo_model_split_across_vnpu_and_cpu(name):
    model = _with_logits(resolve(f"zoo:{name}?weights=random&seed=1"))
    for seed in range(2):
        feeds = input_for(model, seed=seed)
        with nnhal.Session(model) as s:
            want = s.run(feeds)
        with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8",
                           device_options={"vnpu": {"trace": True}}) as s:
            got = s.run(feeds)
            report = s.report()
            vnpu_subgraphs = [sg for sg in s.subgraphs if sg.device == "vnpu"]
            worst = max(c.max_diff for sg in vnpu_subgraphs for c in check_subgraph(sg))
        # the split: several subgraphs on both devices, every node accounted for
        assert set(report.by_device()) == {"vnpu", "cpu"} and len(report.subgraphs) >= 3
        placed = {d.node for d in report.decisions}
        assert placed == {n for sg in report.subgraphs for n in sg.nodes}
        assert all(d.reason for d in report.decisions)
        # uint8 tensors within one step of the CPU's quantized reference
        assert worst <= 1
        # top-1 agrees with fp32, and the logits stay close
        assert np.array_equal(got[0].reshape(1, -1).argmax(1), want[0].reshape(1, -1).argmax(1))
        logits, ref = got[-1].ravel(), want[-1].ravel()
        # "within 2% relative": the largest error relative to the fp32 output's range (NNAPI's
        # relaxed tolerance scaled to the output range); the L2 relative error is printed too
        scaled = np.abs(logits - ref).max() / (ref.max() - ref.min())
        rel = np.linalg.norm(logits - ref) / np.linalg.norm(ref)
        print(f"{name} seed {seed}: logits max error / range {scaled:.4f}, L2 relative {rel:.4f}, "
              f"subgraphs {len(report.subgraphs)}")
        assert scaled < 0.02 and rel < 0.03


def test_limits_show_in_the_placement_report():
    w = numpy_helper.from_array(np.ones((2, 3, 9, 9), np.float32), "w")
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="big_kernel")],
                       [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 2, 8, 8])], [w])
    report = nnhal.explain(model, devices=["vnpu", "cpu"], precision="uint8")
    decision = report.decisions[0]
    assert decision.device == "cpu"
    assert "kernel [9, 9] exceeds the vnpu's 7x7" in decision.declined["vnpu"]
    # and at fp32 the vnpu declines for precision
    report = nnhal.explain(conv_model(), devices=["vnpu", "cpu"], precision="fp32")
    assert "does not support precision fp32" in report.decisions[0].declined["vnpu"]


def test_device_options_are_typed():
    with pytest.raises(nnhal.DeviceError, match=r"no option\(s\) \['speed'\]; its options are "
                                                 r"\['memory_mb', 'trace'\]"):
        nnhal.create_context("x", devices=["vnpu"], device_options={"vnpu": {"speed": 2}})
    with pytest.raises(nnhal.DeviceError, match="memory_mb must be a positive number"):
        nnhal.create_context("x", devices=["vnpu"], device_options={"vnpu": {"memory_mb": -1}})


def test_out_of_device_memory_falls_back_to_cpu(caplog):
    x = RNG.standard_normal((1, 4, 7, 7)).astype(np.float32)
    model = conv_model()
    with nnhal.Session(model, devices=["cpu"]) as s:
        want = s.run({"x": x})[0]
    with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8",
                       device_options={"vnpu": {"memory_mb": 0.0001}}) as s:
        got = s.run({"x": x})[0]
        assert [f.stage for f in s.fallbacks] == ["pre_run"] and "out of device memory" in s.fallbacks[0].error
        assert all(sg.device == "cpu" for sg in s.subgraphs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "re-placed on cpu" in caplog.text
    with pytest.raises(nnhal.DeviceError, match="out of device memory"):
        with nnhal.Session(model, devices=["vnpu"], precision="uint8", strict=True,
                           device_options={"vnpu": {"memory_mb": 0.0001}}) as s:
            s.run({"x": x})


def test_bytes_moved_are_counted():
    x = RNG.standard_normal((1, 4, 7, 7)).astype(np.float32)
    with nnhal.Session(conv_model(), devices=["vnpu", "cpu"], precision="uint8") as s:
        s.run({"x": x})
        sg = _vnpu_subgraph(s)
        assert sg.stats["bytes_in"] == 4 * 7 * 7 and sg.stats["bytes_out"] == 6
