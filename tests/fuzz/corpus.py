"""The real models the fuzzer mutates, in a fixed order.

- the bundled digits CNN (nnhal/data/digits_cnn.onnx);
- a small BERT encoder built by nnhal.models.bert (dynamic batch and sequence);
- the pytorch-converted / pytorch-operator / simple models the onnx wheel ships on disk;
- node-test models of a chosen set of onnx backend test modules (control flow included; the
  modules whose reference computation is slow to import are left out);
- two light zoo models of the onnx wheel (squeezenet, shufflenet).
"""
from __future__ import annotations

import importlib
import os
import warnings
from pathlib import Path

import onnx

# NOTE: each of these imports in milliseconds; averagepool/maxpool/resize take seconds.
NODE_MODULES = (
    "abs", "add", "batch_normalization", "cast", "castlike", "clip", "compress", "concat", "constantofshape",
    "conv", "convtranspose", "cumsum", "depthtospace", "dequantizelinear", "einsum", "expand", "flatten",
    "gather", "gatherelements", "gathernd", "gemm", "gru", "identity", "if_", "instance_normalization",
    "layernormalization", "loop", "lstm", "matmul", "matmulinteger", "mod", "nonzero", "onehot", "pad",
    "qlinearconv", "qlinearmatmul", "quantizelinear", "rangeop", "reducemean", "reducesum", "reshape",
    "reversesequence", "rnn", "scan", "scatterelements", "scatternd", "shape", "size", "slice", "softmax",
    "spacetodepth", "split", "squeeze", "tile", "topk", "transpose", "trilu", "unique", "unsqueeze", "where",
)
ZOO = ("squeezenet", "shufflenet")


def _wheel_data() -> Path:
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


def _disk_models() -> list[tuple[str, bytes]]:
    out = []
    for folder in ("simple", "pytorch-operator", "pytorch-converted"):
        for case in sorted((_wheel_data() / folder).iterdir()):
            path = case / "model.onnx"
            if path.is_file():
                out.append((f"{folder}/{case.name}", path.read_bytes()))
    return out


def _node_models() -> list[tuple[str, bytes]]:
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in NODE_MODULES:
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    # NOTE: the node-case package collects what its modules export into this list as they import
    cases = sorted(node_cases._NodeTestCases, key=lambda c: c.name)
    seen: set[str] = set()
    out = []
    for case in cases:
        if case.name not in seen and case.model is not None:
            seen.add(case.name)
            out.append((f"node/{case.name}", case.model.SerializeToString()))
    return out


def _own_models() -> list[tuple[str, bytes]]:
    from nnhal.models.bert import build_bert

    digits = Path(importlib.import_module("nnhal").__file__).parent / "data" / "digits_cnn.onnx"
    bert = build_bert(layers=1, hidden=16, heads=2, seq=None, vocab=50, max_position=16, seed=1)
    zoo = [(f"zoo/{name}", (_wheel_data() / "light" / f"light_{name}.onnx").read_bytes()) for name in ZOO]
    return [("digits_cnn", digits.read_bytes()), ("bert", bert.SerializeToString())] + zoo


def base_models() -> list[tuple[str, bytes]]:
    """(name, serialized model) of every base model, in a fixed order."""
    return _own_models() + _disk_models() + _node_models()
