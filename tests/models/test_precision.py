"""Precision on zoo models: fp16 within NNAPI's relaxed tolerance, int8 top-1 agreement after
calibration, fp16 placement reasons, and models pre-quantized by onnxruntime on cpu and vnpu."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import version_converter

import nnhal
from nnhal.conformance.tolerance import policy
from nnhal.zoo import input_for, resolve
from tests.oracles import NO_VNNI_REASON, cpu_has_vnni, layerwise_reference, reference_outputs


@pytest.mark.parametrize("name", ["resnet50", "squeezenet"])
def test_fp16_within_relaxed_tolerance_scaled_to_the_output_range(name):
    model = resolve(f"zoo:{name}?weights=random&seed=1")
    feeds = input_for(model, seed=3)
    with nnhal.Session(model) as s:
        want = s.run(feeds)[0]
    with nnhal.Session(model, precision="fp16") as s:
        got = s.run(feeds)[0]
        assert {sg.precision for sg in s.subgraphs} == {"fp16"}
    tol = policy("fp16")
    scale = max(1.0, float(want.max() - want.min()))
    assert got.dtype == np.float32
    assert np.all(np.abs(got - want) <= tol.atol * scale + tol.rtol * np.abs(want))


@pytest.mark.parametrize("name, inputs", [("squeezenet", 64), ("resnet50", 64)])
def test_int8_top1_agreement_after_calibration(name, inputs):
    model = resolve(f"zoo:{name}?weights=random&seed=1")
    calibration = nnhal.calibrate(model, [input_for(model, seed=1000 + i) for i in range(32)], progress=False)
    agree = 0
    with nnhal.Session(model) as fp32, nnhal.Session(model, precision="int8", calibration=calibration.ranges) as q:
        for seed in range(inputs):
            feeds = input_for(model, seed=seed)
            agree += int(np.argmax(fp32.run(feeds)[0]) == np.argmax(q.run(feeds)[0]))
    print(f"{name}: int8 top-1 agreement {agree}/{inputs}")
    assert agree >= 0.95 * inputs


def test_fp16_goes_where_a_device_describes_it():
    model = resolve("zoo:squeezenet?weights=random")
    report = nnhal.explain(model, devices=["vnpu", "cpu"], precision="fp16")
    assert report.by_device() == {"cpu": len(report.decisions)}
    vnpu_ops = next(d for d in nnhal.devices() if d.name == "vnpu").describe().ops
    for d in report.decisions:
        if d.op_type in vnpu_ops:
            assert d.declined["vnpu"] == "does not support precision fp16 (it has uint8)"


def _ort_quantize(tmp_path_factory, fmt: str):
    quant = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime's quantization tool (test extra)")
    model = version_converter.convert_version(resolve("zoo:squeezenet?weights=random&seed=1"), 13)
    folder = tmp_path_factory.mktemp("ortq")
    src, dst = folder / "fp32.onnx", folder / f"{fmt}.onnx"
    onnx.save(model, str(src))

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([input_for(model, seed=s) for s in range(8)])

        def get_next(self):
            return next(self.feeds, None)

    quant.quantize_static(str(src), str(dst), Reader(), quant_format=getattr(quant.QuantFormat, fmt),
                          per_channel=True, activation_type=quant.QuantType.QUInt8, weight_type=quant.QuantType.QInt8)
    return model, onnx.load(str(dst))


@pytest.fixture(scope="module")
def ort_quantized(tmp_path_factory):
    """SqueezeNet quantized by onnxruntime's own tool (QDQ, uint8 activations, int8 per-channel weights)."""
    return _ort_quantize(tmp_path_factory, "QDQ")


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_onnxruntime_quantized_model_matches_its_oracle_on_cpu(tmp_path_factory, ort_quantized, fmt):
    """Every quantized tensor within one step of the oracle: onnx.reference layer by layer for QDQ (any CPU);
    onnxruntime for QOperator (its com.microsoft ops have no other implementation), only where exact."""
    import onnxruntime as ort

    if fmt == "QOperator" and not cpu_has_vnni():
        pytest.skip(NO_VNNI_REASON)
    model, qdq = ort_quantized if fmt == "QDQ" else _ort_quantize(tmp_path_factory, fmt)
    probe = onnx.ModelProto()
    probe.CopyFrom(qdq)
    quantized = [n.output[0] for n in probe.graph.node
                 if n.op_type in ("QuantizeLinear", "QLinearConv", "QLinearConcat", "QLinearGlobalAveragePool")]
    for name in quantized:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.UINT8, None))
    feeds = input_for(model, seed=42)
    with nnhal.Session(probe) as s:
        got = s.run(feeds)
    if fmt == "QDQ":        # each quantized tensor from nnhal's own inputs to its layer: no cascading
        exact = layerwise_reference(probe, feeds, quantized, dict(zip(quantized, got[1:])))
        want = [None] + [exact[name] for name in quantized]
    else:
        want = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    worst = max(int(np.abs(g.astype(np.int64) - w.astype(np.int64)).max()) for g, w in zip(got[1:], want[1:]))
    assert len(quantized) > 20 and worst <= 1, f"{fmt}: {worst}"


@pytest.mark.parametrize("devices", [["cpu"], ["vnpu", "cpu"]])
def test_onnxruntime_quantized_model_runs_quantized_on_cpu_and_vnpu(ort_quantized, devices):
    model, qdq = ort_quantized
    feeds = input_for(model, seed=7)
    want = reference_outputs(qdq, feeds)[0]        # the QDQ model's exact meaning, on any CPU
    with nnhal.Session(qdq, devices=devices, precision="uint8") as s:
        got = s.run(feeds)[0]
        placed = s.report().by_device()
    assert set(placed) == set(devices)
    # the model's own parameters are used (no calibration): within two output steps of the reference, whose
    # float32 accumulation is off by one step now and then, cascading (vnpu requantizes in fixed point)
    assert np.abs(got - want).max() <= 2.5 / 255
