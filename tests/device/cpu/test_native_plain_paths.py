"""The plain C paths of the kernels with hand-written intrinsic paths (the few-row packed GEMV, the float16
conversions, the softmax rows: native.simd_paths()). On a CPU without AVX2/F16C, and on Arm, only the plain
paths run; NNHAL_NATIVE_SIMD=0 selects them on any machine, and this file reruns those kernels' own oracle
tests in a child process with it set (the switch is read once per path, so it cannot be flipped in this one)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")

HERE = Path(__file__).parent
# the oracle tests of the kernels with intrinsic paths: the packed GEMV (test_native_gemv), the float16
# conversions (test_cast_half, test_native_resize_nchw's float16 rows), the softmax (test_softmax_middle_axis,
# the attention step's rows in test_attention_fuse)
ORACLE_FILES = ("test_native_gemv.py", "test_cast_half.py", "test_native_resize_nchw.py",
                "test_softmax_middle_axis.py", "test_attention_fuse.py", "test_native_sigmoid.py")


def _child_env(value: str | None) -> dict:
    env = dict(os.environ)
    env.pop("NNHAL_NATIVE_SIMD", None)
    if value is not None:
        env["NNHAL_NATIVE_SIMD"] = value
    return env


def _paths(value: str | None) -> dict:
    code = "import json; from nnhal.device.cpu import native; print(json.dumps(native.simd_paths()))"
    out = subprocess.run([sys.executable, "-c", code], env=_child_env(value), capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_switch_turns_every_intrinsic_path_off():
    """With NNHAL_NATIVE_SIMD=0 no path reports its intrinsics; without it, what the CPU has (here: as many as
    this process reports, each a bool)."""
    off = _paths("0")
    assert set(off) == {"gemv", "half", "softmax", "sigmoid"}
    assert not any(off.values()), off
    on = _paths(None)
    assert on == native.simd_paths()
    assert all(isinstance(v, bool) for v in on.values())


def test_the_plain_paths_pass_the_kernels_oracle_tests():
    """The oracle tests of the three kernels (float64 products within the reordered-sum bound, numpy's float16
    rounding bit for bit, softmax within its bound, the attention step against onnxruntime) pass on the plain C
    paths. Skipped where the CPU has no intrinsic path at all: the ordinary run already took the plain ones."""
    if not any(native.simd_paths().values()):
        pytest.skip("this CPU runs no intrinsic path: the plain C paths are the ones the suite already ran")
    files = [str(HERE / name) for name in ORACLE_FILES]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *files],
                          env=_child_env("0"), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
