"""Fixtures of the cpu device's tests."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu.kernels import concat as concat_kernel


@pytest.fixture
def concat_copies(monkeypatch) -> list[str]:
    """The names of the Concat inputs the native Concat copies (those not already inside its output), in order,
    over every run of every session made while the test runs."""
    copied: list[str] = []
    prepare = concat_kernel.ConcatNative.prepare

    def counting_prepare(self, node, ins, outs):
        run = prepare(self, node, ins, outs)

        def counted(inputs, outputs):
            copied.extend(node.inputs[i] for i, a in enumerate(inputs) if not np.may_share_memory(a, outputs[0]))
            return run(inputs, outputs)

        return counted

    monkeypatch.setattr(concat_kernel.ConcatNative, "prepare", counting_prepare)
    return copied
