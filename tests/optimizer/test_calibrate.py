"""nnhal.calibrate: ranges per method, determinism, QDQ models in onnxruntime and nnhal."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnhal
from nnhal.conformance.tolerance import (
    assert_within_bound,
    gamma,
    matmul_bound,
    steps_off,
    unit_roundoff,
)
from nnhal.errors import InputError, OptionsError
from nnhal.optimizer.calibrate import CalibrationTable, _entropy_threshold
from nnhal.zoo import input_for, resolve
from tests.oracles import layerwise_reference, reference_outputs

DIGITS = Path(nnhal.__file__).resolve().parent / "data" / "digits_cnn.onnx"
METHODS = ("minmax", "percentile", "entropy")


@pytest.fixture(scope="module")
def digits():
    """(train feeds of 64 images, held-out images, held-out labels), the training script's split."""
    pytest.importorskip("sklearn", reason="scikit-learn provides the digits data (pip install scikit-learn)")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    x_train, x_test, _, y_test = train_test_split(x, d.target, test_size=450, random_state=0, stratify=d.target)
    return [{"input": x_train[i:i + 64]} for i in range(0, len(x_train), 64)], x_test, y_test


@pytest.fixture(scope="module")
def digits_tables(digits):
    feeds, _, _ = digits
    return {m: nnhal.calibrate(str(DIGITS), feeds, method=m, progress=False) for m in METHODS}


@pytest.fixture(scope="module")
def squeezenet():
    model = resolve("zoo:squeezenet?weights=random")
    return model, [input_for(model, seed=s) for s in range(3)], input_for(model, seed=100)


def _ort(model, feeds):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ------------------------------------------------------------------ ranges
def test_every_float_tensor_gets_a_range(digits_tables):
    table = digits_tables["minmax"]
    assert isinstance(table, CalibrationTable) and table.method == "minmax" and table.scheme == "uint8"
    for name in ["input", "conv1", "relu1", "conv2", "relu2", "pool", "flat", "fc1", "relu3", "logits",
                 "conv1.weight", "fc2.bias"]:
        assert name in table.ranges, name
    assert table.ranges["input"] == (0.0, 1.0)
    assert table.ranges["relu1"][0] == 0.0 and table.ranges["relu3"][0] == 0.0
    assert all(isinstance(v, float) for r in table.ranges.values() for v in r)


@pytest.mark.parametrize("method", METHODS)
def test_ranges_are_deterministic(digits, digits_tables, method):
    feeds, _, _ = digits
    again = nnhal.calibrate(str(DIGITS), iter(feeds), method=method, progress=False)   # a generator works too
    assert again.ranges == digits_tables[method].ranges


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_histogram_ranges_lie_within_minmax(digits_tables, method):
    extremes, table = digits_tables["minmax"].ranges, digits_tables[method].ranges
    assert table.keys() == extremes.keys()
    narrower = 0
    for name, (lo, hi) in table.items():
        mlo, mhi = extremes[name]
        assert mlo <= lo <= hi <= mhi, (name, (lo, hi), (mlo, mhi))
        narrower += (hi - lo) < (mhi - mlo) * 0.999
    assert narrower >= 3, f"{method} clipped only {narrower} tensors"


def test_percentile_100_is_minmax_and_lower_percentiles_clip_more(digits):
    feeds, _, _ = digits
    full = nnhal.calibrate(str(DIGITS), feeds, method="percentile", percentile=100.0, progress=False).ranges
    extremes = nnhal.calibrate(str(DIGITS), feeds, method="minmax", progress=False).ranges
    for name, (lo, hi) in extremes.items():
        assert full[name] == pytest.approx((lo, hi), abs=1e-6 * max(1.0, hi - lo)), name
    p99 = nnhal.calibrate(str(DIGITS), feeds, method="percentile", percentile=99.0, progress=False).ranges
    p9999 = nnhal.calibrate(str(DIGITS), feeds, method="percentile", percentile=99.99, progress=False).ranges
    assert p99["relu3"][1] < p9999["relu3"][1] <= extremes["relu3"][1]


def test_entropy_threshold_of_known_distributions():
    rng = np.random.default_rng(0)
    normal = np.abs(rng.standard_normal(500_000))
    hist, _ = np.histogram(normal, 2048, (0.0, float(normal.max())))
    t = _entropy_threshold(hist, float(normal.max()))
    assert 3.0 < t < 4.5             # a few sigma: the tails are clipped, the body kept
    uniform = np.abs(rng.uniform(-1, 1, 500_000))
    hist, _ = np.histogram(uniform, 2048, (0.0, 1.0))
    assert _entropy_threshold(hist, 1.0) > 0.98   # nothing to clip


def test_params_follow_the_scheme(digits):
    feeds, _, _ = digits
    u8 = nnhal.calibrate(str(DIGITS), feeds[:2], scheme="uint8", progress=False)
    i8 = nnhal.calibrate(str(DIGITS), feeds[:2], scheme="int8", progress=False)
    assert u8.ranges == i8.ranges       # minmax ranges do not depend on the scheme
    q = u8.params("conv1")
    lo, hi = u8.ranges["conv1"]
    assert q.zero_point.dtype == np.uint8 and float(q.scale) == pytest.approx((hi - lo) / 255, rel=1e-6)
    q = i8.params("conv1")
    assert q.zero_point.dtype == np.int8 and int(q.zero_point) == 0
    assert float(q.scale) == pytest.approx(max(abs(lo), abs(hi)) / 127, rel=1e-6)
    with pytest.raises(KeyError):
        u8.params("no such tensor")


def test_bad_arguments():
    with pytest.raises(OptionsError, match="method"):
        nnhal.calibrate(str(DIGITS), [], method="kl")
    with pytest.raises(OptionsError, match="scheme"):
        nnhal.calibrate(str(DIGITS), [], scheme="int4")
    with pytest.raises(OptionsError, match="percentile"):
        nnhal.calibrate(str(DIGITS), [], method="percentile", percentile=20)
    with pytest.raises(InputError, match="at least one feed"):
        nnhal.calibrate(str(DIGITS), [], progress=False)
    with pytest.raises(InputError, match="lacks inputs"):
        nnhal.calibrate(str(DIGITS), [{"x": np.zeros((1, 1, 8, 8), np.float32)}], progress=False)


def test_progress_lines_when_stderr_is_not_a_tty(digits, capsys):
    feeds, _, _ = digits
    nnhal.calibrate(str(DIGITS), feeds, method="percentile", progress=True)
    err = capsys.readouterr().err.splitlines()
    assert 4 <= len(err) <= 8 and "pass 1/2" in err[0] and err[-1].startswith("calibrate (percentile) pass 2/2: done")
    nnhal.calibrate(str(DIGITS), feeds, progress=False)
    assert capsys.readouterr().err == ""


def test_ranges_feed_the_core_calibration(digits, digits_tables):
    _, x_test, y_test = digits
    ranges = digits_tables["percentile"].ranges
    opts = nnhal.Options(precision="uint8", calibration=ranges)
    assert opts.calibration == ranges          # held as a dict of float pairs
    with nnhal.Session(str(DIGITS), precision="uint8", calibration=ranges) as s:
        logits = s.run({"input": x_test})[0]
    assert logits.shape == (450, 10) and np.mean(logits.argmax(1) == y_test) > 0.95


# ------------------------------------------------------------------ QDQ models
def _check_layer_by_layer(path: Path, feeds: dict[str, np.ndarray], tail_bound) -> np.ndarray:
    """nnhal's run of the QDQ model at ``path``, each quantized tensor checked against onnx.reference fed
    nnhal's own values of the others (tests/oracles.py::layerwise_reference: no cascading), within one
    quantization step (nnhal.conformance.tolerance.steps_off says why one), and the float output, computed
    from nnhal's own last quantized tensor, within ``tail_bound(probe, values, reference_output)``."""
    probe = onnx.load(str(path))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in probe.graph.initializer}
    quantized = [n.output[0] for n in probe.graph.node if n.op_type == "QuantizeLinear"]
    elem = {n.output[0]: onnx.helper.np_dtype_to_tensor_dtype(inits[n.input[2]].dtype)
            for n in probe.graph.node if n.op_type == "QuantizeLinear"}
    out = probe.graph.output[0].name
    for name in quantized:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, elem[name], None))
    with nnhal.Session(probe) as s:
        got = s.run(feeds)
    values = dict(zip([out, *quantized], got))
    exact = layerwise_reference(probe, feeds, [*quantized, out], values)
    for name in quantized:
        why = steps_off(values[name], exact[name])
        assert why is None, f"{name}: {why}"
    assert_within_bound(values[out], exact[out], tail_bound(probe, inits, values, exact[out]))
    return values[out]


def _dequantized(probe, inits, values, name):
    node = next(n for n in probe.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == name)
    q = values[name].astype(np.float64) - inits[node.input[2]].astype(np.float64)
    return q * inits[node.input[1]].astype(np.float64)


def _gemm_tail(probe, inits, values, _):
    """The digits model ends in Gemm(dequantized relu3, dequantized fc2 weight, fc2 bias): its reduction
    bound from the actual operands (the bias is one more term of each sum)."""
    gemm = probe.graph.node[-1]
    assert gemm.op_type == "Gemm" and gemm.input[0] == "relu3_dequantized"
    x = _dequantized(probe, inits, values, "relu3_quantized")
    w_dq = next(n for n in probe.graph.node if n.output[0] == gemm.input[1])
    w = inits[w_dq.input[0]].astype(np.float64) * inits[w_dq.input[1]].astype(np.float64)[:, None]
    ones = np.ones((x.shape[0], 1))
    return matmul_bound(np.hstack([x, ones]), np.vstack([w.T, np.abs(inits[gemm.input[2]])[None, :]]))


def _softmax_tail(probe, inits, values, want):
    """SqueezeNet ends in Softmax of its dequantized last quantized tensor (1,000 classes, the same floats on
    both sides): y_i = exp(x_i - m) / sum_j exp(x_j - m). The rounding of x - m moves exp by u |x - m| at
    most; the exp itself is within 4 ulps (numpy and libm float32 exp: 4 roundings); the sum of 1,000 positive
    terms and the divide add gamma_1001. Relative to each y, on each side."""
    assert [n.op_type for n in probe.graph.node[-3:]] == ["Flatten", "Softmax", "Reshape"]
    last = next(n.input[0] for n in probe.graph.node if n.op_type == "DequantizeLinear"
                and n.output[0] == probe.graph.node[-3].input[0])
    x = _dequantized(probe, inits, values, last).reshape(want.shape)
    rel = gamma(want.size + 4 + 1) + 2 * unit_roundoff() * float(np.max(x) - np.min(x))
    return 2 * rel * np.abs(want.astype(np.float64))


def _qdq_structure(path: Path, scheme: str):
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    ops = [n.op_type for n in model.graph.node]
    weights = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
               and inits[n.input[0]].ndim >= 2]
    for n in weights:
        assert inits[n.input[0]].dtype == np.int8 and inits[n.input[2]].dtype == np.int8
        assert not inits[n.input[2]].any()                             # symmetric
        axis = next(a.i for a in n.attribute if a.name == "axis")
        assert inits[n.input[1]].shape == (inits[n.input[0]].shape[axis],)   # per channel
    act = np.int8 if scheme == "int8" else np.uint8
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear":
            assert inits[n.input[2]].dtype == act and inits[n.input[1]].ndim == 0
            if scheme == "int8":
                assert int(inits[n.input[2]]) == 0
    # floats no longer feed the weight inputs directly; biases stay float
    producers = {o: n for n in model.graph.node for o in n.output}
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm"):
            assert producers[n.input[1]].op_type == "DequantizeLinear"
            assert n.input[0] not in inits and producers.get(n.input[0]) is not None
            assert producers[n.input[0]].op_type == "DequantizeLinear"
            if len(n.input) > 2:
                assert inits[n.input[2]].dtype == np.float32
    return ops, weights


@pytest.mark.parametrize("scheme", ["uint8", "int8"])
@pytest.mark.parametrize("method", METHODS)
def test_digits_qdq_model_runs_close_to_fp32(tmp_path, digits, method, scheme):
    feeds, x_test, y_test = digits
    path = tmp_path / f"digits_{method}_{scheme}.onnx"
    nnhal.calibrate(str(DIGITS), feeds, method=method, scheme=scheme, output=path, progress=False)
    ops, weights = _qdq_structure(path, scheme)
    assert len(weights) == 4                                   # 2 Conv + 2 Gemm
    assert ops.count("QuantizeLinear") == 9                   # input + 8 consumed activations; logits stays float
    ref = _ort(DIGITS, {"input": x_test})
    # the quantized model's exact meaning (CPU-independent: see tests/oracles.py)
    exact = reference_outputs(path, {"input": x_test})[0]
    # nnhal computes the QDQ model exactly: one step at a rounding boundary, float rounding of the last sums
    mine = _check_layer_by_layer(path, {"input": x_test}, _gemm_tail)
    fp32_acc = np.mean(ref.argmax(1) == y_test)
    for y in (exact, mine):
        assert np.mean(y.argmax(1) == y_test) >= fp32_acc - 0.01
        assert np.mean(y.argmax(1) == ref.argmax(1)) >= 0.98
        assert _cosine(y, ref) > 0.995


@pytest.mark.parametrize("scheme", ["uint8", "int8"])
@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_squeezenet_qdq_model_runs_close_to_fp32(tmp_path, squeezenet, method, scheme):
    model, feeds, test = squeezenet
    path = tmp_path / f"squeezenet_{method}_{scheme}.onnx"
    table = nnhal.calibrate(model, feeds, method=method, scheme=scheme, output=path, progress=False)
    assert "data_0" in table.ranges
    ops, weights = _qdq_structure(path, scheme)
    assert len(weights) == 26                                   # every Conv weight
    out = onnx.load(str(path))
    assert next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx")) >= 13
    ref = _ort(model, test)
    exact = reference_outputs(path, test)[0]
    mine = _check_layer_by_layer(path, test, _softmax_tail)
    for y in (exact, mine):
        assert y.shape == ref.shape
        assert y.argmax() == ref.argmax()
        assert _cosine(y, ref) > 0.99


def test_squeezenet_entropy_ranges_are_sane(squeezenet):
    model, feeds, _ = squeezenet
    extremes = nnhal.calibrate(model, feeds[:2], method="minmax", progress=False).ranges
    table = nnhal.calibrate(model, feeds[:2], method="entropy", progress=False)
    assert table.ranges.keys() == extremes.keys()
    for name, (lo, hi) in table.ranges.items():
        assert extremes[name][0] <= lo <= hi <= extremes[name][1], name
