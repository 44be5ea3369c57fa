"""Differential random-graph testing on every registered device, and proof that it catches a broken kernel."""
from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal.conformance.random_graph import GENERATORS, differential, generate, replay
from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import register_device, unregister_device

SEEDS = range(40)


def test_generator_is_deterministic_and_valid():
    import onnx
    a, fa = generate(7, GENERATORS)
    b, fb = generate(7, GENERATORS)
    assert a.SerializeToString() == b.SerializeToString()
    np.testing.assert_array_equal(fa["x"], fb["x"])
    onnx.checker.check_model(a, full_check=True)


@pytest.mark.parametrize("device", [d.name for d in (nnhal.init() or nnhal.devices())])
def test_no_mismatch_on_registered_devices(device):
    # each device at its own precision: the cpu at fp32 against its reference kernels,
    # the vnpu at uint8 against the cpu's quantized execution
    found = differential(device, SEEDS)
    assert not found, "\n".join(str(m) for m in found)


def _broken_device() -> Device:
    """Runs Relu right and Add wrong whenever a sum exceeds 1 (a planted bug)."""
    def run(device, sg):
        for node in sg.nodes:
            args = [sg.values[i] if i in sg.values else sg.graph.tensors[i].value for i in node.inputs]
            if node.op_type == "Relu":
                out = np.maximum(args[0], 0)
            else:
                out = args[0] + args[1]
                out = np.where(out > 1, out + 0.01, out).astype(np.float32)
            sg.values[node.outputs[0]] = out

    return Device("broken", Interface(run=run),
                  Allocator(describe=lambda d: Description(frozenset({"Relu", "Add"}), ("fp32",))))


def test_planted_bug_is_caught_minimized_and_replayable():
    register_device(_broken_device())
    try:
        found = differential("broken", range(10))
        assert found, "the planted Add bug was not caught"
        first = found[0]
        text = str(first)
        assert f"seed {first.seed}" in text and f"replay({first.seed}, 'broken')" in text
        assert first.nodes[-1].endswith("(Add)")
        again = replay(first.seed, "broken")
        assert again is not None and again.nodes == first.nodes
    finally:
        unregister_device("broken")
