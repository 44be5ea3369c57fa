"""The device kit (nnhal.testing) on openvino: every hook called in lifecycle order (sync and async runs,
profile), subgraph boundaries against the CPU, fallback to the CPU, one Session run from several threads,
output ownership, balanced lifetimes, the API version against the hooks filled, and a slice of the node
suite run strictly on openvino (no CPU to hide behind), with the weights as graph inputs and as
initializers. The whole suite is ``nnhal validate --device openvino`` (docs/openvino.md has its numbers)."""
from __future__ import annotations

import pytest

from nnhal import testing

# the ops of the zoo, BERT and the modern models: where a wrong kernel would show first (the function-expanded
# variants of the cases are left to `nnhal validate`: they repeat the same ops, decomposed)
KIT_OPS = ["Conv", "Gemm", "MatMul", "Relu", "Softmax", "Add", "MaxPool", "AveragePool", "LayerNormalization",
           "Erf", "Concat", "Transpose", "Reshape", "BatchNormalization", "Sigmoid", "Where"]


def test_hook_order(openvino):
    testing.check_hook_order("openvino")


def test_boundaries(openvino):
    testing.check_boundaries("openvino")


def test_fallback(openvino):
    testing.check_fallback("openvino")


def test_concurrent_runs(openvino):
    testing.check_concurrent_runs("openvino")


@pytest.mark.parametrize("check", ["check_output_ownership", "check_lifetime", "check_api_version"])
def test_contract(openvino, check):
    getattr(testing, check)("openvino")


def _cases():
    from tests.device.openvino.conftest import HAVE_OPENVINO

    if not HAVE_OPENVINO:
        return []
    import nnhal

    nnhal.init()
    return [c for c in testing.conformance_cases("openvino", KIT_OPS) if not c.name.endswith("_expanded")]


@pytest.mark.parametrize("constant_weights", [False, True], ids=["weights-as-inputs", "constant-weights"])
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.name)
def test_conformance(openvino, case, constant_weights):
    # constant weights: the case's weight inputs become initializers, as a vendor compiler sees real models
    testing.check_case("openvino", case, constant_weights=constant_weights)
