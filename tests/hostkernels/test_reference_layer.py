"""The host kernels are the numpy reference layer (DESIGN.md, "Native code"): every op of the table has a
"reference" implementation, and none is channels-last (NHWC kernels belong to a device's layout pass, the
cpu device's in device/cpu/kernels/). The imports are pinned by tests/test_layering.py."""
from __future__ import annotations

import importlib

import pytest

from nnhal.hostkernels.table import DOMAINS

# Constant has a prototype but no kernel: import turns every Constant node into a constant tensor
NO_KERNEL = {"op_constant"}
MODULES = sorted({m for domain, table in DOMAINS.items() if domain != "ai.onnx" for m in table.values()} - NO_KERNEL)


@pytest.mark.parametrize("module", MODULES)
def test_every_op_has_a_reference_and_no_channels_last_kernel(module):
    classes = importlib.import_module(f"nnhal.hostkernels.{module}").IMPLEMENTATIONS
    assert any(cls.name == "reference" for cls in classes), f"{module}: {[c.name for c in classes]}"
    nhwc = [cls.__name__ for cls in classes if cls.layout is not None]
    assert not nhwc, f"{module}: channels-last kernels in the host layer: {nhwc}"
