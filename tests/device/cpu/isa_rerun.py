"""Re-running a test file with the integer kernels forced onto one instruction set (NNHAL_QGEMM_ISA), so every
path this CPU has is tested on one machine: shared by the kernel tests and the graph tests."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def rerun_under_isa(path: str, isa: str, available: list[str], select: str) -> None:
    """Run the tests of ``path`` matching ``-k select`` in a fresh process with NNHAL_QGEMM_ISA=isa; skip,
    saying why, inside such a run already or when this CPU lacks ``isa`` (``available``: the ones it has)."""
    if os.environ.get("NNHAL_QGEMM_ISA"):
        pytest.skip("already inside a forced-ISA run")
    if isa not in available:
        pytest.skip(f"this CPU lacks {isa} (it has {', '.join(available)})")
    env = dict(os.environ, NNHAL_QGEMM_ISA=isa)
    run = subprocess.run([sys.executable, "-m", "pytest", path, "-q", "-x", "-p", "no:cacheprovider", "-k", select],
                         env=env, check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
