"""Real Ray nodes on this machine, started with `ray start` as a user would, each in a session of its own.

A node is a process session: `ray start` runs as its leader (start_new_session), and every process the
node starts (GCS, raylet, agents, workers, which set their own process group) keeps that session ID, so
stopping the node kills exactly the processes of that session, never another Ray on the machine. Token
authentication is on (RAY_AUTH_MODE=token) with a token of the cluster's own in RAY_AUTH_TOKEN_PATH, so
~/.ray/auth_token is neither read nor written.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``, read from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()    # after "pid (comm) ": state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


@dataclass
class RayNode:
    """One `ray start` node: its session ID and temp dir."""

    name: str
    sid: int
    temp_dir: Path
    output: str

    @property
    def node_id(self) -> str | None:
        """The node's Ray ID, read from the files its raylet names after it in the session folder."""
        for path in (self.temp_dir / "session_latest").glob("metrics_export_port_*"):
            return path.name.rpartition("_")[2]
        return None

    def stop(self, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> list[int]:
        """Signal every process of the node's session; SIGKILL what is left after wait_s. Returns survivors."""
        deadline = time.monotonic() + wait_s
        for pid in session_members(self.sid):
            _signal(pid, sig)
        while session_members(self.sid) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in session_members(self.sid):
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0       # a killed process takes a moment to exit (memory to free)
        while session_members(self.sid) and time.monotonic() < deadline:
            time.sleep(0.1)
        return session_members(self.sid)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class LocalCluster:
    """A head and worker nodes on this machine; ``env`` is what a client needs (token authentication)."""

    root: Path
    port: int
    env: dict[str, str]
    nodes: list[RayNode] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self, name: str, num_cpus: int, resources: dict[str, float], extra_env: dict[str, str] | None = None,
               head: bool = False) -> tuple[RayNode, subprocess.Popen]:
        """Run `ray start` for one node (the head when ``head``) with its own temp dir and ports; wait() it."""
        temp = self.root / name
        args = [sys.executable, "-m", "ray.scripts.scripts", "start", f"--num-cpus={num_cpus}",
                f"--resources={json.dumps(resources)}", f"--temp-dir={temp}", "--disable-usage-stats",
                f"--dashboard-agent-listen-port={free_port()}", "--object-store-memory=100000000"]
        if head:
            args += ["--head", f"--port={self.port}", "--include-dashboard=false", f"--dashboard-port={free_port()}"]
            if importlib.util.find_spec("grpc") is not None:      # Ray Client (ray://), with ray[client]
                args.append(f"--ray-client-server-port={free_port()}")
        else:
            args.append(f"--address={self.address}")
        env = dict(self.env, **(extra_env or {}))
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        node = RayNode(name, proc.pid, temp, "")
        self.nodes.append(node)                 # stopped by stop() even when the start fails half way
        return node, proc

    @staticmethod
    def wait(node: RayNode, proc: subprocess.Popen, timeout_s: float = 120) -> RayNode:
        """Wait for a launch's `ray start` to return; RuntimeError when it fails."""
        try:
            node.output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"`ray start` for the {node.name} node did not return in {timeout_s} s") from exc
        if proc.returncode != 0:
            raise RuntimeError(f"`ray start` for the {node.name} node failed ({proc.returncode}): "
                               f"{node.output[-1500:]}")
        return node

    def start_head_and_worker(self, head: dict, worker: dict, timeout_s: float = 120) -> None:
        """Start the head, and the worker node as soon as the head's GCS port answers (its `ray start` retries
        until the GCS is ready), rather than after the head's whole start: node starts cost seconds each."""
        launched = [self.launch("head", head=True, **head)]
        deadline = time.monotonic() + timeout_s
        while launched[0][1].poll() in (None, 0) and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                time.sleep(0.2)
                continue
            launched.append(self.launch("worker", **worker))
            break
        for node, proc in launched:
            self.wait(node, proc, timeout_s)
        if len(launched) < 2:
            raise RuntimeError(f"the head's GCS port {self.port} did not answer in {timeout_s} s")

    def stop(self) -> list[int]:
        """Stop every node (the workers first); returns the PIDs that survived SIGKILL (none expected)."""
        survivors = []
        for node in reversed(self.nodes):
            survivors += node.stop(signal.SIGTERM, wait_s=2.0)
        shutil.rmtree(self.root, ignore_errors=True)
        return survivors


def client_env() -> dict[str, str]:
    """This process's environment without a Ray address or auth settings of its own (they are the cluster's)."""
    drop = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    return {k: v for k, v in os.environ.items() if k not in drop}


def new_cluster() -> LocalCluster:
    """An empty cluster: a short temp root (Ray's socket paths must stay under 108 bytes) with its token."""
    root = Path(tempfile.mkdtemp(prefix="nnhal-ray-"))
    token = root / "auth_token"
    token.write_text(uuid.uuid4().hex)
    env = dict(client_env(), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    return LocalCluster(root, free_port(), env)


# NOTE: the GCS marks a node dead after health_check_failure_threshold missed checks, one every
# health_check_period_ms (5 x 3 s by default); a test that loses a node waits for it, so its head checks faster
FAST_FAILURE_DETECTION = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
                          "RAY_health_check_timeout_ms": "1000"}
