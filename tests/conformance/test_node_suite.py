"""The ONNX backend node suite on the CPU device: zero wrong results, and a pass floor that only rises."""
from __future__ import annotations

from collections import Counter

import pytest

from nnhal.conformance.runner import ERROR, PASS, UNSUPPORTED, WRONG, run_suite

# Raise this as coverage grows; never lower it.
PASS_FLOOR = 1544


# checked: every kernel's output verified against inference (the interpreting loop); straight: the path users run
# (generated straight-line code, native step programs), where a planning bug of the fast path shows (an Identity
# bound to its input while a step program read its never-written buffer gave 45 wrong attention cases)
@pytest.fixture(scope="module", params=["checked", "straight"])
def results(request, monkeypatch_module):
    monkeypatch_module.setenv("NNHAL_CHECK", "1" if request.param == "checked" else "0")
    return run_suite("cpu", "fp32", progress=False)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_no_wrong_results(results):
    wrong = [f"{r.name}: {r.reason}" for r in results if r.status == WRONG]
    assert not wrong, "\n".join(wrong)


def test_pass_count_floor(results):
    counts = Counter(r.status for r in results)
    print(f"\nnode suite on cpu: {counts[PASS]} pass, {counts[WRONG]} wrong, {counts[UNSUPPORTED]} unsupported, "
          f"{counts[ERROR]} error of {len(results)}")
    assert counts[PASS] >= PASS_FLOOR


def test_unsupported_is_always_a_reasoned_rejection(results):
    for r in results:
        if r.status == UNSUPPORTED:
            assert r.reason, r.name


def test_every_case_records_where_its_nodes_ran(results):
    for r in results:
        if r.status == PASS:
            assert set(r.placement.values()) <= {"cpu"}, r.name
