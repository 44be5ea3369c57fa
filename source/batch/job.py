"""Running a batch job on Ray Data: the manifest, the parts already complete, the pending ones on actors."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nnhal.batch.inputs import list_input, plan_parts
from nnhal.batch.runner import PartRunner
from nnhal.batch.spec import JobReport, JobSpec, Part
from nnhal.errors import OptionsError
from nnhal.ray import actor_options, device_resources

log = logging.getLogger("nnhal.batch")
MANIFEST = "_nnhal_batch.json"
HEAD_RESOURCE = "node:__internal_head__"          # Ray's resource of the head node


def complete_parts(output: Path, parts: list[Part]) -> set[int]:
    """The parts whose final file is in OUTPUT with its full row count (temporary files are removed)."""
    import pyarrow.parquet as pq

    for stale in output.glob(".part-*.tmp"):
        stale.unlink()
    done = set()
    for part in parts:
        path = output / part.name
        if path.is_file():
            try:
                meta = pq.read_metadata(path)
            except (OSError, ValueError):
                continue
            if meta.num_rows == part.rows:
                done.add(part.index)
    return done


def _check_manifest(output: Path, job: JobSpec, source: str, parts: list[Part]) -> None:
    """Refuse to resume into OUTPUT when it holds another job (another model, input, options or parts)."""
    digest = hashlib.sha256(json.dumps([p.items for p in parts]).encode()).hexdigest()
    # NOTE: threads and on_error do not change what a part holds, so a rerun may change them
    fields = {k: v for k, v in asdict(job).items() if k not in ("threads", "on_error")}
    manifest = json.loads(json.dumps({"input": str(Path(source).resolve()), "parts": len(parts), "plan": digest,
                                      **fields}))
    path = output / MANIFEST
    if path.is_file():
        before = json.loads(path.read_text())
        changed = sorted(k for k in set(manifest) | set(before) if before.get(k) != manifest.get(k))
        if changed:
            raise OptionsError(f"output '{output}' holds the parts of another job (it differs in "
                               f"{', '.join(changed)}); rerun with the same arguments to resume, or choose a "
                               "new output folder")
        return
    tmp = output / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, path)


def run_job(job: JobSpec, source: str, output: str, rows_per_part: int = 64, actors: int = 2,
            resources: dict[str, float] | None = None, runner: type = PartRunner) -> JobReport:
    """Run a job on the Ray cluster this process is connected to; parts already complete are skipped."""
    import ray.data

    t0 = time.perf_counter()
    _, files = list_input(source, job.on_error)
    parts = plan_parts(files, rows_per_part)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    _check_manifest(out, job, source, parts)
    done = complete_parts(out, parts)
    pending = [p for p in parts if p.index not in done]
    report = JobReport(parts=len(parts), skipped=len(done))
    if pending:
        ds = ray.data.from_items([{"part": p.index, "items": json.dumps(p.items)} for p in pending],
                                 override_num_blocks=len(pending))
        resources = device_resources(list(job.devices)) if resources is None else resources
        attempts = _attempt_log()
        ds = ds.map_batches(runner, fn_constructor_kwargs={"job": job, "output": str(out), "attempts": attempts},
                            batch_size=1, batch_format="numpy",
                            **actor_options(min(actors, len(pending)), job.threads, resources=resources))
        finished: dict[int, str] = {}                   # part -> the node of the attempt that finished
        try:
            for row in ds.iter_rows():
                report.written += 1
                report.rows += int(row["rows"])
                report.failed.extend((key, why) for key, why in json.loads(row["failed"]))
                finished[int(row["part"])] = str(row["node"])
            _account(report, finished, _starts(attempts))
        finally:
            ray.kill(attempts)
    report.seconds = time.perf_counter() - t0
    return report


class AttemptLog:
    """A Ray actor on the head node: each (part, node) a PartRunner started. A part started more often
    than it finished lost its other attempts (its actor or node died) and Ray ran it again."""

    def __init__(self) -> None:
        self.log: list[tuple[int, str]] = []

    def start(self, part: int, node: str) -> None:
        self.log.append((part, node))

    def starts(self) -> list[tuple[int, str]]:
        return self.log


def _attempt_log() -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # NOTE: pinned (soft affinity let Ray place it on a worker node) to the head, which outlives the job: a
    # lost worker node must not take the log with it. Without a head in view, the driver's node.
    heads = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and HEAD_RESOURCE in n.get("Resources", {})]
    node = heads[0] if heads else ray.get_runtime_context().get_node_id()
    pinned = NodeAffinitySchedulingStrategy(node, soft=False)
    return ray.remote(AttemptLog).options(num_cpus=0, scheduling_strategy=pinned).remote()


def _starts(attempts: Any) -> list[tuple[int, str]]:
    """What the AttemptLog recorded; nothing (no retries counted) when it is out of reach."""
    import ray
    from ray.exceptions import RayError

    try:
        return ray.get(attempts.starts.remote(), timeout=60)
    except RayError as exc:
        log.warning("nnhal batch: the attempt log is out of reach (%s); retries are not counted", exc)
        return []


def _account(report: JobReport, finished: dict[int, str], starts: list[tuple[int, str]]) -> None:
    """Parts per node, the attempts lost per node (starts less the one that finished), and what each node is."""
    import ray

    for node in finished.values():
        report.nodes[node] = report.nodes.get(node, 0) + 1
    left = dict(finished)
    for part, node in starts:
        if left.get(part) == node:
            del left[part]                      # the attempt that finished
        else:
            report.lost[node] = report.lost.get(node, 0) + 1
    for info in ray.nodes():
        node = info["NodeID"]
        if node in report.nodes or node in report.lost:
            notes = [info.get("NodeManagerAddress", "?")]
            if HEAD_RESOURCE in info.get("Resources", {}):
                notes.append("head")
            if not info.get("Alive", True):
                notes.append("lost")
            report.node_notes[node] = ", ".join(notes)
