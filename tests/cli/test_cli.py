"""The nnhal command line, run as a user would."""
from __future__ import annotations

import subprocess
import sys


def nnhal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnhal.cli.main", *args], capture_output=True, text=True, timeout=600)


def test_devices_lists_cpu_and_vnpu():
    out = nnhal("devices")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines()[1:]}
    assert "NNHAL_ENABLE_CPU=ON" in lines["cpu"] and "registered" in lines["cpu"]
    assert "uint8" in lines["vnpu"]


def test_run_zoo_model_with_random_weights():
    out = nnhal("run", "zoo:squeezenet?weights=random", "--repeat", "2")
    assert out.returncode == 0, out.stderr
    assert "output softmaxout_1: float32[1, 1000, 1, 1]" in out.stdout
    assert "latency over 2 runs" in out.stdout


def test_run_on_vnpu_and_cpu():
    out = nnhal("run", "zoo:squeezenet?weights=random", "--device", "vnpu,cpu", "--precision", "uint8", "--repeat", "1")
    assert out.returncode == 0, out.stderr
    assert "vnpu:" in out.stdout and "cpu:" in out.stdout


def test_placement_explains_before_compiling():
    out = nnhal("placement", "zoo:inception_v1?weights=random", "--device", "vnpu,cpu", "--precision", "uint8")
    assert out.returncode == 0, out.stderr
    assert "declined by vnpu: does not support op LRN" in out.stdout
    assert "subgraph(s):" in out.stdout and "bytes cross between subgraphs" in out.stdout


def test_errors_are_one_clear_line():
    out = nnhal("run", "zoo:nosuchnet")
    assert out.returncode == 2
    assert out.stderr.startswith("nnhal: error: no zoo model 'nosuchnet'")


def test_profile_shows_subgraphs_ops_and_nodes():
    out = nnhal("profile", "zoo:squeezenet?weights=random", "--runs", "2", "--top", "3")
    assert out.returncode == 0, out.stderr
    assert "profile over 2 run(s)" in out.stdout
    assert "by op and kernel" in out.stdout and "nhwc-gemm" in out.stdout
    assert "slowest 3 nodes" in out.stdout
