"""The ONNX backend node cases that webgpu claims (every op of the case has a WGSL kernel), run on
webgpu with strict=True so a device failure is an error, not a silent CPU fallback.

0 wrong, 0 errors; more than 300 cases run with every node on webgpu. The others are declined by
evaluation with a reason (dtypes other than float32/int, non-constant axes, 3-D windows, ...) and run
on the CPU, which the kit's own suite covers."""
from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from nnhal.conformance.runner import ERROR, PASS, WRONG, collect_cases, run_case
from nnhal.device.webgpu.kernels.table import KERNELS

# Raise this as coverage grows; never lower it.
PASS_FLOOR = 372


@pytest.fixture(scope="module")
def results(webgpu):
    claimed = set(KERNELS) | {"Constant"}      # Constant nodes are folded before placement
    cases = [c for c in collect_cases() if {n.op_type for n in c.model.graph.node} <= claimed]
    return [run_case(c, "webgpu", "fp32", strict=True) for c in cases]


def test_no_wrong_results_and_no_errors(results):
    bad = [f"{r.status} {r.name}: {r.reason}" for r in results if r.status in (WRONG, ERROR)]
    assert not bad, "\n".join(bad)


def test_more_than_300_cases_run_entirely_on_webgpu(results):
    on_gpu = [r for r in results if r.status == PASS and set(r.placement.values()) == {"webgpu"}]
    per_op: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        where = "webgpu" if r.status == PASS and set(r.placement.values()) == {"webgpu"} else r.status
        for op in r.ops:
            per_op[op][where] += 1
    print(f"\nwebgpu node cases: {len(on_gpu)} pass on webgpu of {len(results)} claimed")
    for op in sorted(per_op):
        print(f"  {op:22s} {dict(per_op[op])}")
    assert len(on_gpu) >= PASS_FLOOR
