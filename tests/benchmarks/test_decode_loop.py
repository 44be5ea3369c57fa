"""benchmarks/decode_loop.py runs end to end: nnhal and onnxruntime generate the same tokens."""
import importlib.util
import os

import pytest

pytest.importorskip("onnxruntime", reason="the decode-loop benchmark compares with onnxruntime")
pytest.importorskip("torch", reason="the decode-loop benchmark exports its model with torch")

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "decode_loop.py")


def test_decode_loop_generates_the_same_tokens(capsys, monkeypatch):
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        monkeypatch.delenv(var, raising=False)   # else main re-executes the process without them
    spec = importlib.util.spec_from_file_location("decode_loop", PATH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--tokens", "3", "--rounds", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "same tokens: True" in out and "tokens/s" in out
