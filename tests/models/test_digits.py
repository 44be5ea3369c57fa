"""The shipped digits CNN (source/data/digits_cnn.onnx, tools/train_digits.py) on its held-out split.

fp32 must reproduce what the training script printed (444/450 = 98.67 %) and
onnxruntime's predictions; reduced precisions, calibrated on the training
images, must stay within 1 pp (fp16, int8, uint8) / 0.5 pp (mixed) of fp32.
"""
from __future__ import annotations

from importlib import resources

import numpy as np
import onnxruntime as ort
import pytest

import nnhal

EXPECTED_CORRECT = 444          # printed by tools/train_digits.py: held-out accuracy (fp32): 0.9867 (444/450)
HELD_OUT = 450


def model_path() -> str:
    return str(resources.files("nnhal.data").joinpath("digits_cnn.onnx"))


@pytest.fixture(scope="module")
def split():
    """(x_train, x_test, y_train, y_test) exactly as tools/train_digits.py splits them."""
    pytest.importorskip("sklearn", reason="scikit-learn provides the 8x8 digits data set (pip install scikit-learn)")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=HELD_OUT, random_state=0, stratify=y)


@pytest.fixture(scope="module")
def fp32_logits(split):
    _, x_test, _, _ = split
    with nnhal.Session(model_path(), devices=["cpu"]) as s:
        return s.run({"input": x_test})[0]


def test_model_ships_with_the_package():
    import onnx

    model = onnx.load(model_path())
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N" and [d.dim_value for d in dims[1:]] == [1, 8, 8]
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 17


def test_fp32_accuracy_matches_training(split, fp32_logits):
    _, x_test, _, y_test = split
    assert len(y_test) == HELD_OUT and fp32_logits.shape == (HELD_OUT, 10)
    correct = int(np.sum(fp32_logits.argmax(1) == y_test))
    assert correct == EXPECTED_CORRECT
    assert correct / HELD_OUT >= 0.97


def test_fp32_equals_onnxruntime(split, fp32_logits):
    _, x_test, _, _ = split
    ref = ort.InferenceSession(model_path(), providers=["CPUExecutionProvider"]).run(None, {"input": x_test})[0]
    np.testing.assert_allclose(fp32_logits, ref, rtol=1e-4, atol=1e-4)
    # the same predictions by a reason, not by the BLAS's summation order: every image's two top logits lie
    # further apart than twice that tolerance (0.23 at least), so no difference within it swaps them
    top2 = np.sort(ref, axis=1)[:, -2:]
    assert np.all(top2[:, 1] - top2[:, 0] > 2 * (1e-4 + 1e-4 * np.abs(top2).max(axis=1)))
    np.testing.assert_array_equal(fp32_logits.argmax(1), ref.argmax(1))


def test_batch_sizes_agree(split, fp32_logits):
    _, x_test, _, _ = split
    with nnhal.Session(model_path()) as s:
        one = np.concatenate([s.run({"input": x_test[i:i + 1]})[0] for i in range(0, 40)])
    np.testing.assert_allclose(one, fp32_logits[:40], rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def calibration(split):
    x_train, _, _, _ = split
    feeds = [{"input": x_train[i:i + 128]} for i in range(0, len(x_train), 128)]
    return nnhal.calibrate(model_path(), feeds, method="minmax", progress=False)


@pytest.mark.parametrize("precision, tolerance_pp", [("fp16", 1.0), ("int8", 1.0), ("uint8", 1.0), ("mixed", 0.5)])
def test_reduced_precision_accuracy(split, fp32_logits, calibration, precision, tolerance_pp):
    _, x_test, _, y_test = split
    with nnhal.Session(model_path(), devices=["cpu"], precision=precision, calibration=calibration.ranges) as s:
        logits = s.run({"input": x_test})[0]
    fp32 = 100.0 * np.mean(fp32_logits.argmax(1) == y_test)
    acc = 100.0 * np.mean(logits.argmax(1) == y_test)
    assert acc >= fp32 - tolerance_pp, f"{precision}: {acc:.2f} % vs fp32 {fp32:.2f} %"


def test_compare_precisions_report(split):
    from nnhal.accuracy import compare_precisions, format_report

    x_train, x_test, _, y_test = split
    calib = [{"input": x_train[i:i + 128]} for i in range(0, len(x_train), 128)]
    feeds = [{"input": x_test[i:i + 150]} for i in range(0, HELD_OUT, 150)]
    report = compare_precisions(model_path(), feeds, ("fp16", "int8", "no-such-precision"), ["cpu"],
                                labels=y_test, calibration_feeds=calib)
    assert report.baseline.accuracy == pytest.approx(EXPECTED_CORRECT / HELD_OUT)
    assert report["fp16"].available and report["fp16"].cosine > 0.9999
    assert report["int8"].available and report["int8"].top1_agreement >= 0.98
    assert abs(report["int8"].accuracy - report.baseline.accuracy) <= 0.01
    bad = report["no-such-precision"]
    assert not bad.available and "OptionsError" in bad.reason
    text = format_report(report)
    assert "not available: OptionsError" in text and "accuracy" in text


def test_cli_accuracy_with_data_and_labels(split, tmp_path, capsys):
    from nnhal.cli.main import main

    x_train, x_test, y_train, y_test = split
    np.savez(tmp_path / "inputs.npz", input=np.concatenate([x_train[:HELD_OUT], x_test]))
    np.save(tmp_path / "labels.npy", np.concatenate([y_train[:HELD_OUT], y_test]))
    rc = main(["accuracy", model_path(), "--precision", "fp16,int8", "--data", str(tmp_path / "inputs.npz"),
               "--labels", str(tmp_path / "labels.npy"), "--batch", "150"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert "98.67%" in rows["fp32"]                       # evaluated on the second half: the held-out images
    assert "fp16" in rows and "int8" in rows
    assert "evaluation: 3 feed(s) (450 samples)" in out


def test_cli_accuracy_zoo_model_without_data(capsys):
    from nnhal.cli.main import main

    assert main(["accuracy", "zoo:squeezenet?weights=random", "--precision", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "calibration: minmax on 4 feed(s) (4 samples); evaluation: 4 feed(s) (4 samples)" in out
    assert out.splitlines()[-1].startswith("fp16")
