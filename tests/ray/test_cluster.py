"""`nnhal batch --address` on a real two-node Ray cluster started with `ray start`, token authentication on.

One cluster for the module (a head of 2 CPUs and a worker node of 1, each offering the custom resource
nnhal_cpu, every job's actors asking for one), started in sessions of their own and stopped by session,
so no Ray process of another test or user is touched. The lost-node test runs last: it stops the worker.
"""
from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.ray.cluster import FAST_FAILURE_DETECTION, LocalCluster, client_env, new_cluster
from tests.ray.conftest import loop

NODE_LINE = re.compile(r"^  node ([0-9a-f]{56}) \(([^)]*)\): (\d+) part\(s\)$", re.MULTILINE)


@pytest.fixture(scope="module")
def two_nodes(request) -> LocalCluster:
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'nnhal[ray]')")
    if not Path("/proc/self/stat").is_file():
        pytest.skip("the nodes are stopped by session ID, read from /proc (Linux)")
    cluster = new_cluster()

    def stop() -> None:
        survivors = cluster.stop()
        assert not survivors, f"Ray processes of the test cluster survived SIGKILL: {survivors}"

    request.addfinalizer(stop)
    try:
        # the head keeps a CPU spare beside its actor: room for the worker's actor when the worker is lost
        head = dict(num_cpus=2, resources={"nnhal_cpu": 2}, extra_env=FAST_FAILURE_DETECTION)
        worker = dict(num_cpus=1, resources={"nnhal_cpu": 1}, extra_env={"NNHAL_TEST_ROLE": "worker"})
        cluster.start_head_and_worker(head, worker)
    except RuntimeError as exc:
        pytest.skip(f"`ray start` cannot run here: {exc}")
    return cluster


def _batch(argv: list[str], env: dict[str, str], driver: list[str] | None = None,
           timeout: float = 240) -> subprocess.CompletedProcess:
    command = driver or [sys.executable, "-m", "nnhal.cli.main"]
    return subprocess.run(command + ["batch", *argv], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=Path(__file__).resolve().parents[2])


def _check_rows(output: Path, model: str, rows: np.ndarray) -> None:
    """Every input row in the output exactly once, in order, with the loop's logits."""
    import pyarrow.parquet as pq

    table = pq.read_table(output).to_pydict()
    assert table["key"] == [f"rows.npz[{i}]" for i in range(len(rows))]
    assert all(e is None for e in table["error"])
    np.testing.assert_allclose(np.array(table["logits"]), loop(model, rows), rtol=1e-5, atol=1e-5)


def test_addresses_that_cannot_work_fail_at_once_saying_why():
    """No cluster needed: a malformed address, a port nothing listens on, ray:// without Ray's client extra."""
    import importlib.util

    pytest.importorskip("ray", reason="Ray is not installed (pip install 'nnhal[ray]')")
    from nnhal.errors import ClusterError, OptionsError
    from nnhal.ray import connect

    with pytest.raises(OptionsError, match="--address takes auto, HOST:PORT or ray://HOST:PORT, got 'head-node'"):
        connect("head-node")
    with socket.socket() as s:              # a port that was free a moment ago, and bound by nobody now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ClusterError, match=f"nothing answers at 127.0.0.1:{port} .*check the address"):
        connect(f"127.0.0.1:{port}")
    if importlib.util.find_spec("grpc") is None:
        with pytest.raises(ClusterError, match=re.escape("needs Ray's client extra: pip install 'ray[client]'")):
            connect(f"ray://127.0.0.1:{port}")


def test_a_version_mismatch_names_both_sides():
    """What ray.init raises when the cluster runs another Ray or Python becomes a ClusterError saying so."""
    import platform

    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'nnhal[ray]')")
    from nnhal.ray import _connect_failure

    skew = RuntimeError("Version mismatch: The cluster was started with:\n    Ray: 2.59.0\n    Python: 3.12.1\n"
                        "This process on node 10.0.0.2 was started with:\n    Ray: 2.60.0\n    Python: 3.11.7\n")
    message = str(_connect_failure("10.0.0.1:6379", skew))
    assert message.startswith("cannot join the Ray cluster at 10.0.0.1:6379: Version mismatch: The cluster was")
    assert f"this process runs Ray {ray.__version__} on Python {platform.python_version()}" in message
    other = str(_connect_failure("10.0.0.1:6379", ConnectionError("Failed to connect to Ray cluster at 10.0.0.1")))
    assert all(what in other for what in ("check the address", "RAY_AUTH_TOKEN", f"Ray {ray.__version__}"))


def test_host_port_with_the_default_token_file(two_nodes, digits_model, digits, tmp_path):
    """The reported failure: `ray start --head` found ~/.ray/auth_token and turned authentication on; a plain
    `nnhal batch --address HOST:PORT` from the same machine now authenticates with that file."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(Path(two_nodes.env["RAY_AUTH_TOKEN_PATH"]).read_text())
    np.savez(tmp_path / "rows.npz", input=digits[:16])
    done = _batch([digits_model, str(tmp_path / "rows.npz"), str(tmp_path / "out"), "--address", two_nodes.address,
                   "--rows-per-part", "4", "--resource", "nnhal_cpu=1"], dict(client_env(), HOME=str(home)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 part(s): 0 complete before (skipped), 4 written; 16 row(s)" in done.stdout
    _check_rows(tmp_path / "out", digits_model, digits[:16])
    ran = NODE_LINE.findall(done.stdout)
    ids = {node.node_id: node.name for node in two_nodes.nodes}
    assert ran and sum(int(parts) for _, _, parts in ran) == 4
    assert {node for node, _, _ in ran} <= set(ids), (ran, ids)
    for node, notes, _ in ran:
        assert ("head" in notes.split(", ")) == (ids[node] == "head"), done.stdout


def test_no_token_is_exit_2_naming_what_to_set(two_nodes, digits_model, digits, tmp_path):
    np.savez(tmp_path / "rows.npz", input=digits[:4])
    done = _batch([digits_model, str(tmp_path / "rows.npz"), str(tmp_path / "out"), "--address", two_nodes.address],
                  dict(client_env(), HOME=str(tmp_path)))                 # no token anywhere
    assert done.returncode == 2, done.stderr[-3000:]
    assert "requires token authentication, which is off in this process (RAY_AUTH_MODE=unset)" in done.stderr
    assert all(name in done.stderr for name in ("RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                                                "~/.ray/auth_token", "ray get-auth-token"))
    assert not list((tmp_path / "out").glob("part-*"))


CONNECT = """
import os, sys, ray, nnhal.ray as r
from nnhal.errors import ClusterError
os.environ["RAY_AUTH_TOKEN"] = "not-the-token"
try:
    r.connect(sys.argv[1])
except ClusterError as exc:
    print("refused:", exc)
print("mode after a failure:", os.environ.get("RAY_AUTH_MODE"))
os.environ["RAY_AUTH_TOKEN"] = sys.argv[2]
r.connect(sys.argv[1])
print("nnhal_cpu:", int(ray.cluster_resources()["nnhal_cpu"]))
r.disconnect()
print("mode after disconnect:", os.environ.get("RAY_AUTH_MODE"))
"""


def test_a_token_in_the_environment_is_used_and_a_wrong_one_named(two_nodes, tmp_path):
    """RAY_AUTH_TOKEN alone (RAY_AUTH_MODE unset) turns token mode on for the connection, and off after it."""
    token = Path(two_nodes.env["RAY_AUTH_TOKEN_PATH"]).read_text()
    done = subprocess.run([sys.executable, "-c", CONNECT, two_nodes.address, token], capture_output=True, text=True,
                          timeout=120, env=dict(client_env(), HOME=str(tmp_path)))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "refused the token from RAY_AUTH_TOKEN: it is not this cluster's token" in lines[0], lines
    assert lines[1:] == ["mode after a failure: None", "nnhal_cpu: 3", "mode after disconnect: None"]


def test_a_lost_worker_node_still_gives_every_row_once(two_nodes, digits_model, digits, tmp_path):
    """Actors on both nodes; the worker node is killed (raylet and all) with a part in flight on it. The job
    ends on the head with every row once, and the summary names the lost node and the attempts run again."""
    sync = tmp_path / "sync"
    sync.mkdir()
    np.savez(tmp_path / "rows.npz", input=digits[:24])
    worker = two_nodes.nodes[1]
    killed: list[int] = []

    def stop_worker_when_stalled() -> None:
        deadline = time.monotonic() + 200
        while not (sync / "stalled").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if (sync / "stalled").exists():
            killed.append(int((sync / "stalled").read_text()))
            worker.stop()

    watcher = threading.Thread(target=stop_worker_when_stalled, daemon=True)
    watcher.start()
    driver = [sys.executable, str(Path(__file__).with_name("cluster_driver.py")), str(sync)]
    done = _batch([digits_model, str(tmp_path / "rows.npz"), str(tmp_path / "out"), "--address", two_nodes.address,
                   "--rows-per-part", "2", "--batch-size", "2", "--resource", "nnhal_cpu=1"],
                  two_nodes.env, driver=driver)
    watcher.join(timeout=5)
    assert killed, f"no part stalled on the worker node: {done.stdout[-2000:]} {done.stderr[-3000:]}"
    assert done.returncode == 0, done.stderr[-3000:]
    assert "12 part(s): 0 complete before (skipped), 12 written; 24 row(s)" in done.stdout
    _check_rows(tmp_path / "out", digits_model, digits[:24])
    assert not list((tmp_path / "out").glob(".part-*"))             # no temporary file left behind
    ran = {node: (notes.split(", "), int(parts)) for node, notes, parts in NODE_LINE.findall(done.stdout)}
    head, lost = two_nodes.nodes[0].node_id, worker.node_id
    assert set(ran) == {head, lost}, done.stdout                    # the worker wrote its first part
    assert "head" in ran[head][0] and "lost" in ran[lost][0]
    retried = re.search(r"^retries: (\d+) part attempt\(s\) lost and run again: (.*)$", done.stdout, re.MULTILINE)
    assert retried, done.stdout
    assert int(retried.group(1)) >= 1 and f"on node {lost} (" in retried.group(2)
