"""precision="mixed": the chosen precision keeps the measured error bound, and says what it did."""
from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

import nnhal


def digits_model() -> bytes:
    return resources.files("nnhal.data").joinpath("digits_cnn.onnx").read_bytes()


def images(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 17, (n, 1, 8, 8)) / 16.0).astype(np.float32)


@pytest.mark.parametrize("tolerance", [0.05, 1e-4, 1e-9])
def test_mixed_keeps_its_bound(tolerance):
    x = images(32)
    with nnhal.Session(digits_model()) as s:
        want = s.run({"input": x})[0]
    with nnhal.Session(digits_model(), precision="mixed", mixed_tolerance=tolerance) as s:
        got = s.run({"input": x})[0]
        report = s.mixed
    error = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert error <= tolerance or report.precision == "fp32"
    assert report.tried[-1][1] <= tolerance or report.precision == "fp32"
    text = str(report)
    assert text.startswith(f"mixed chose {report.precision}") and "uint8:" in text
    if tolerance == 0.05:
        assert report.precision == "uint8" and not report.fp32_nodes
    if tolerance == 1e-9:
        assert report.precision == "fp32" and any(what.startswith("uint8 with") for what, _ in report.tried)


def test_mixed_needs_inputs_before_prerun():
    g = nnhal.create_graph(nnhal.create_context(), "onnx", digits_model())
    with pytest.raises(nnhal.InputError, match="precision 'mixed' measures errors on real inputs"):
        nnhal.prerun_graph(g, nnhal.Options(precision="mixed"))
