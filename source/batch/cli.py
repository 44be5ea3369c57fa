"""``nnhal batch``: connect to (or start) Ray, run the job, report what was done and which rows failed."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from nnhal.batch.inputs import list_input
from nnhal.batch.job import run_job
from nnhal.batch.runner import PartRunner
from nnhal.batch.spec import JobReport, JobSpec
from nnhal.errors import NnhalError, OptionsError
from nnhal.ray import device_resources


def _nnhal_error(exc: BaseException) -> NnhalError | None:
    """The NnhalError a Ray task raised. Ray Data re-raises a UDF's error as UserCodeException, keeping
    only its traceback text, so the last ``nnhal.errors.<Class>: message`` line of it is rebuilt."""
    from nnhal import errors

    if isinstance(exc, NnhalError):
        return exc
    found = re.findall(r"^(?:nnhal\.errors\.)?(\w+Error): (.*)$", str(exc), flags=re.MULTILINE)
    for name, message in reversed(found):
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, NnhalError):
            return cls(message)
    return None


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError as exc:
        raise OptionsError(f"{what} takes comma-separated numbers, got '{text}'") from exc


def _placement(report: JobReport) -> list[str]:
    """Where the parts ran (Ray node IDs) and the attempts lost and run again, for the summary."""
    lines = []
    if report.nodes:
        lines.append(f"actors ran on {len(report.nodes)} node(s):")
        lines += [f"  node {node} ({report.node_notes.get(node, '?')}): {parts} part(s)"
                  for node, parts in sorted(report.nodes.items(), key=lambda kv: -kv[1])]
    if report.retries:
        where = ", ".join(f"{n} on node {node} ({report.node_notes.get(node, '?')})"
                          for node, n in sorted(report.lost.items()))
        lines.append(f"retries: {report.retries} part attempt(s) lost and run again: {where}")
    return lines


def run_cli(args: Any, runner: type = PartRunner) -> int:
    """``nnhal batch``: connect to (or start) Ray, run the job, print what was done and what failed.
    ``runner`` is the actor class (a PartRunner subclass in tests that stop a node mid-part)."""
    try:
        import ray
    except ImportError as exc:
        raise OptionsError("nnhal batch runs on Ray Data: pip install 'nnhal[ray]'") from exc
    import nnhal

    kind, _ = list_input(args.input, args.on_error)
    devices = tuple(d for d in args.device.split(",") if d)
    job = JobSpec(model=args.model, kind=kind, devices=devices, precision=args.precision, threads=args.threads,
                  batch_size=args.batch_size, on_error=args.on_error, key_column=args.key,
                  mean=_floats(args.mean, "--mean"), std=_floats(args.std, "--std"))
    resources = dict(device_resources(list(devices)))
    for spec in args.resource:
        name, sep, amount = spec.partition("=")
        if not sep:
            raise OptionsError(f"--resource takes NAME=AMOUNT (per actor), got '{spec}'")
        resources[name] = float(_floats(amount, "--resource")[0])
    started = not ray.is_initialized()
    address = args.address or os.environ.get("RAY_ADDRESS")      # Ray's variable, as ray.init reads it
    if started and address:
        from nnhal.ray import connect

        connect(address)
    elif started:
        # NOTE: the embedded single-machine cluster offers each locally registered device to every actor
        nnhal.init()
        local = {d.name for d in nnhal.devices()}
        offered = {r: float(args.actors) for r in resources if r.removeprefix("nnhal_") in local}
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, resources=offered or None)
    try:
        from nnhal.ray import check_resources

        if resources:
            check_resources(resources)
        report = run_job(job, args.input, args.output, args.rows_per_part, args.actors, resources, runner)
    except Exception as exc:   # Ray wraps the task's error; find ours, or report Ray's own
        found = _nnhal_error(exc)
        complete = len(list(Path(args.output).glob("part-*.parquet"))) if Path(args.output).is_dir() else 0
        kept = f"; {complete} complete part(s) in {args.output} are kept, run again to resume"
        if found is not None:
            raise type(found)(f"{found}{kept}") from exc
        if isinstance(exc, NnhalError):
            raise
        raise NnhalError(f"the Ray job failed: {str(exc).strip().splitlines()[-1]}{kept}") from exc
    finally:
        if started:
            from nnhal.ray import disconnect

            disconnect()
    rate = report.rows / report.seconds if report.seconds else 0.0
    print(f"nnhal batch: {report.parts} part(s): {report.skipped} complete before (skipped), {report.written} "
          f"written; {report.rows} row(s) in {report.seconds:.1f} s ({rate:.2f} rows/s)")
    print(f"output: {args.output}/part-*.parquet (columns key, error, one per model output)")
    for line in _placement(report):
        print(line)
    if report.failed:
        print(f"{len(report.failed)} row(s) failed and were skipped (error column set):")
        for key, why in report.failed[:args.show_errors]:
            print(f"  {key}: {why}")
        if len(report.failed) > args.show_errors:
            print(f"  ... and {len(report.failed) - args.show_errors} more")
    return 0
