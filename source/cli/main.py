"""`nnhal` command line: devices, run, profile, placement, registry, validate, accuracy, bench.

Exit codes: 0 all asked for succeeded, 1 checked cases failed, 2 usage or input errors (one line on
stderr), 3 a bug (traceback); see nnhal/cli/common.py. Progress goes to stderr (``--quiet`` silences
it), results to stdout.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from nnhal.ui.command import (
    FAILED,
    OK,
    PRECISIONS,
    UsageError,
    add_quiet,
    device_list,
    fraction,
    guarded,
    held_warnings,
    load_model,
    natural_int,
    output_file,
    positive_int,
    precision_list,
    version,
)
from nnhal.ui.command import parse_inputs as _parse_inputs
from nnhal.ui.progress import Progress


def cmd_devices(args: argparse.Namespace) -> int:
    """Every device nnhal knows of: built-in folders (on or off) and out-of-tree plugins, with where each
    comes from, the device API it targets, and why it is unavailable when it is."""
    from nnhal import api, registry
    from nnhal.device.manager import BUILT_IN

    registered = {d.name: d for d in api.devices()}
    statuses = {(s.name, s.origin): s for s in api.device_status()}
    rows = []
    for entry in registry.ALL_DEVICES:
        status = statuses.pop((entry.name, BUILT_IN), None)
        option = entry.option + ("=ON" if entry.enabled else "=OFF")
        rows.append((entry.name, BUILT_IN, option, status, entry.description))
    rows += [(s.name, s.origin, "-", s, "") for s in statuses.values()]
    table = [("device", "origin", "api", "option", "state", "precisions", "ops", "description")]
    for name, origin, option, status, description in rows:
        dev = registered.get(name) if status is not None and status.available else None
        precisions, ops = "-", "-"
        if dev is not None:
            desc = dev.describe()
            precisions, ops, state = ",".join(desc.precisions), str(len(desc.ops)), "registered"
            if desc.summary and desc.summary != description:
                description = f"{description}: {desc.summary}" if description else desc.summary
            # NOTE: a registered device that describes no ops (webgpu without wgpu or an adapter) is
            # unavailable; its summary says why
            if not desc.ops:
                state = "unavailable"
        elif status is not None:
            state, description = "unavailable", f"{description + ': ' if description else ''}{status.reason}"
        else:
            state = "off"
        version = f"{status.api[0]}.{status.api[1]}" if status is not None and status.api else "-"
        table.append((name, origin, version, option, state, precisions, ops, description))
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return OK


def cmd_run(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.zoo import input_for

    model, proto = load_model(args.model)
    devices = device_list(args.device)
    feeds = input_for(proto, seed=args.seed)
    feeds.update(_parse_inputs(args.input))
    t0 = time.perf_counter()
    with nnhal.Session(model, devices=devices, precision=args.precision, num_thread=args.num_thread) as session:
        created = time.perf_counter() - t0
        return _run_and_report(args, session, feeds, created)


def _run_and_report(args: argparse.Namespace, session, feeds: dict[str, np.ndarray], created: float) -> int:
    """Run once (prepares), then ``--repeat`` timed runs with progress; print outputs, placement, latency."""
    times = []

    def reported(record) -> bool:       # a fallback is printed below with the placement: not warned twice
        return record.getMessage() in {f"nnhal: {e.describe()}" for e in session.fallbacks}

    with held_warnings(reported), Progress("run", args.repeat + 1, quiet=args.quiet) as bar:
        t0 = time.perf_counter()
        outputs = session.run(feeds)
        first = time.perf_counter() - t0
        bar.step(detail="first run (prepares)")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            outputs = session.run(feeds)
            times.append(time.perf_counter() - t0)
            bar.step(detail=f"last {times[-1] * 1e3:.2f} ms")
    print(f"model: {args.model}")
    print(f"devices: {', '.join(session.context.devices)}  precision: {args.precision}")
    for name, value in feeds.items():
        print(f"input  {name}: {value.dtype}{list(value.shape)}")
    for name, value in zip(session.output_names, outputs):
        v = np.asarray(value)
        stats = ""
        if v.size and v.dtype.kind in "fiub":
            stats = f" min {v.min():.6g} max {v.max():.6g} mean {v.astype(np.float64).mean():.6g}"
            if v.ndim == 2 and v.dtype.kind == "f":
                stats += f" argmax {v.argmax(axis=1).tolist()[:8]}"
        print(f"output {name}: {v.dtype}{list(v.shape)}{stats}")
    counts = session.placement.devices()
    print(f"placement: {', '.join(f'{d}: {n} nodes' for d, n in counts.items())}; "
          f"{len(session.subgraphs)} subgraph(s)")
    for event in session.fallbacks:
        print(f"fallback: {event.describe()}")
    print(f"session creation {created * 1e3:.1f} ms; first run (incl. prerun) {first * 1e3:.1f} ms")
    if times:
        print(f"latency over {len(times)} runs: median {np.median(times) * 1e3:.2f} ms, "
              f"min {min(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms")
    return OK


def cmd_profile(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.zoo import input_for

    model, proto = load_model(args.model)
    devices = device_list(args.device)
    feeds = input_for(proto, seed=args.seed)
    feeds.update(_parse_inputs(args.input))
    with nnhal.Session(model, devices=devices, precision=args.precision, num_thread=args.num_thread) as session:
        prof = session.profile(feeds, runs=args.runs, warmup=args.warmup)
    title = f"model: {args.model}  devices: {','.join(devices)}  precision: {args.precision}"
    print(title)
    print(prof.table(args.top), end="")
    if args.html:
        from nnhal.cli.reports import profile_html

        with open(args.html, "w") as f:
            f.write(profile_html(prof, title))
        print(f"wrote {args.html}")
    return OK


def cmd_placement(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.zoo import input_for

    model, proto = load_model(args.model)
    devices = device_list(args.device)
    if not args.run:
        print(nnhal.explain(model, devices=devices, precision=args.precision, min_group_size=args.min_group_size,
                            inputs=_parse_inputs(args.input) or None))
        return OK
    # NOTE: compiled and run once: the conversions the devices chose, and any fallback, are then known
    feeds = input_for(proto, seed=args.seed)
    feeds.update(_parse_inputs(args.input))
    with nnhal.Session(model, devices=devices, precision=args.precision, num_thread=args.num_thread,
                       min_group_size=args.min_group_size) as session:
        session.run(feeds)
        print(session.report())
    return OK


def cmd_registry(args: argparse.Namespace) -> int:
    from nnhal.cli.registry import regenerate

    return regenerate(args.enable, args.disable, args.source, args.verbose)


def cmd_validate(args: argparse.Namespace) -> int:
    from nnhal.conformance.runner import main as validate_main

    argv = ["--device", args.device, "--precision", args.precision]
    if args.ops:
        argv += ["--ops", args.ops]
    if args.pattern:
        argv += ["--pattern", args.pattern]
    if args.report:
        argv += ["--report", args.report]
    if args.verbose:
        argv.append("-v")
    if args.quiet:
        argv.append("-q")
    return validate_main(argv)


def cmd_accuracy(args: argparse.Namespace) -> int:
    from nnhal.accuracy import compare_precisions, format_report
    from nnhal.zoo import input_for

    model, proto = load_model(args.model)
    devices = device_list(args.device)
    inits = {i.name for i in proto.graph.initializer}
    input_names = [i.name for i in proto.graph.input if i.name not in inits]
    if args.data:
        arrays = _load_npz(args.data)
        if len(input_names) == 1 and input_names[0] not in arrays and len(arrays) == 1:
            arrays = {input_names[0]: next(iter(arrays.values()))}
        missing = [n for n in input_names if n not in arrays]
        if missing:
            raise UsageError(f"--data {args.data} lacks the model inputs {missing} (it holds {sorted(arrays)})")
        total = len(arrays[input_names[0]])
        half = total // 2 if total > 1 else 0     # the first half calibrates, the rest is evaluated

        def batches(start: int, stop: int) -> list[dict[str, np.ndarray]]:
            return [{n: np.ascontiguousarray(arrays[n][i:min(i + args.batch, stop)]) for n in input_names}
                    for i in range(start, stop, args.batch)]

        calib, feeds = batches(0, half) if half else None, batches(half, total)
    else:
        half, calib = 4, [input_for(proto, seed=args.seed + i) for i in range(4)]
        feeds = [input_for(proto, seed=args.seed + i) for i in range(4, 8)]
    labels = np.load(args.labels)[half:] if args.labels else None
    report = compare_precisions(model, feeds, args.precision, devices, labels, calibration_method=args.calibration,
                                calibration_feeds=calib, progress=not args.quiet)
    report.model = args.model
    print(format_report(report))
    if args.html:
        from nnhal.cli.reports import accuracy_html

        with open(args.html, "w") as f:
            f.write(accuracy_html(report))
        print(f"wrote {args.html}")
    failures = accuracy_failures(report, args.min_top1, args.min_cosine)
    for line in failures:
        print(f"nnhal: accuracy: {line}", file=sys.stderr)
    return FAILED if failures else OK


def _load_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive (pickles refused); UsageError for anything else."""
    try:
        data = np.load(path)
    except (ValueError, EOFError) as exc:
        raise UsageError(f"--data '{path}' is not an .npz archive of arrays") from exc
    if isinstance(data, np.ndarray):
        raise UsageError(f"--data '{path}' is a single .npy array; give an .npz archive (np.savez) of the inputs")
    with data:
        return {k: data[k] for k in data.files}


def accuracy_failures(report, min_top1: float | None, min_cosine: float | None) -> list[str]:
    """Why the report misses the asked thresholds (a precision unavailable misses them too)."""
    if min_top1 is None and min_cosine is None:
        return []
    failures = []
    for r in report.results:
        if not r.available:
            failures.append(f"{r.precision} is not available: {r.reason}")
        elif min_top1 is not None and r.top1_agreement < min_top1:
            failures.append(f"{r.precision} top-1 agreement {r.top1_agreement:.2%} is below --min-top1 {min_top1:.2%}")
        elif min_cosine is not None and r.cosine < min_cosine:
            failures.append(f"{r.precision} cosine {r.cosine:.6f} is below --min-cosine {min_cosine}")
    return failures


def cmd_batch(args: argparse.Namespace) -> int:
    from nnhal.batch.cli import run_cli

    return run_cli(args)


def add_batch_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("batch", help="run a model over a folder of images, .npz or .parquet on Ray Data; "
                                     "write parquet parts (needs pip install 'nnhal[ray]')")
    p.add_argument("model", help="a path or zoo:<name>[?weights=random]")
    p.add_argument("input", help="a folder of images, an .npz or .parquet file, or a folder of them")
    p.add_argument("output", help="a folder of part-NNNNN.parquet files; complete parts are skipped on a rerun")
    p.add_argument("--device", default="cpu", help="comma-separated device list in priority order")
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16"],
                   help="precision to run at (default: fp32)")
    p.add_argument("--actors", type=int, default=2, help="actors, one Session each")
    p.add_argument("--threads", type=int, default=1, help="threads (and Ray CPUs) per actor")
    p.add_argument("--batch-size", type=int, default=None, help="rows per run when the model's batch dim is free")
    p.add_argument("--rows-per-part", type=int, default=64, help="rows per output file (the unit of resume)")
    p.add_argument("--on-error", default="skip", choices=["skip", "fail"], help="a bad row is skipped or stops the job")
    p.add_argument("--key", default=None, help="parquet input: the column naming a row (default: file[index])")
    p.add_argument("--mean", default="0", help="image inputs: per-channel mean after scaling to [0, 1]")
    p.add_argument("--std", default="1", help="image inputs: per-channel std after scaling to [0, 1]")
    p.add_argument("--resource", action="append", default=[], metavar="NAME=AMOUNT",
                   help="a custom Ray resource each actor needs (default nnhal_<device> per non-cpu device)")
    p.add_argument("--address", default=None,
                   help="an existing Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: $RAY_ADDRESS, "
                        "else start a local one); token authentication as Ray's RAY_AUTH_* variables say")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local cluster (default: all)")
    p.add_argument("--show-errors", type=int, default=20, help="failed rows to list")
    p.set_defaults(func=cmd_batch)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nnhal", description="nnhal: pluggable-device ONNX inference",
        epilog="exit codes: 0 success, 1 checked cases failed, 2 usage or input error, 3 internal error (a bug)")
    parser.add_argument("--version", action="version", version=f"nnhal {version()}",
                        help="print the installed nnhal version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("devices", help="list device folders, their options and what they support")
    p.set_defaults(func=cmd_devices)

    def model_run(name: str, help_text: str) -> argparse.ArgumentParser:
        """A command that runs a model: the model, its devices, precision, inputs and threads."""
        p = sub.add_parser(name, help=help_text)
        p.add_argument("model", help="an .onnx file, or zoo:<name>[?weights=random&seed=N] (onnx's light zoo)")
        p.add_argument("--device", default="cpu", help="comma-separated device list in priority order (default: cpu)")
        p.add_argument("--precision", default="fp32", choices=PRECISIONS, help="precision to run at (default: fp32)")
        p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                       help="an input from a .npy file; repeat for several (default: seeded random)")
        p.add_argument("--num-thread", type=natural_int, default=0, help="worker threads (default 0: one per core)")
        p.add_argument("--seed", type=natural_int, default=0, help="seed of the random inputs (default: 0)")
        return p

    p = model_run("run", "run a model (path or zoo:<name>[?weights=random]) and time it")
    p.add_argument("--repeat", type=natural_int, default=10, help="timed runs after the first (default: 10)")
    add_quiet(p)
    p.set_defaults(func=cmd_run)
    p = model_run("profile", "run a model and show where the time goes, per device, subgraph, op and node")
    p.add_argument("--runs", type=positive_int, default=10, help="timed runs (default: 10)")
    p.add_argument("--warmup", type=natural_int, default=2, help="untimed runs first (default: 2)")
    p.add_argument("--top", type=natural_int, default=20, help="slowest nodes to list (default: 20)")
    p.add_argument("--html", type=output_file(".html", ".htm"), default=None,
                   help="also write an HTML report (sortable tables, a chart of the shares)")
    p.set_defaults(func=cmd_profile)

    p = model_run("placement", "explain where each node of a model runs: devices, reasons, boundary conversions")
    p.add_argument("--min-group-size", type=positive_int, default=1,
                   help="device groups smaller than this go to the fallback device (default: 1)")
    p.add_argument("--run", action="store_true",
                   help="compile and run once: show the conversions the devices chose and any fallback")
    p.set_defaults(func=cmd_placement)
    p = sub.add_parser("registry", help="re-run CMake's configure step and refresh the installed device registry")
    p.add_argument("--enable", action="append", default=[], metavar="DEVICE",
                   help="switch a device folder on (repeat for several)")
    p.add_argument("--disable", action="append", default=[], metavar="DEVICE",
                   help="switch a device folder off (repeat for several)")
    p.add_argument("--source", default=None, help="source tree (default: the one the package was built from)")
    p.add_argument("-v", "--verbose", action="store_true", help="show CMake's output")
    p.set_defaults(func=cmd_registry)
    p = sub.add_parser("validate", help="run the ONNX backend node suite on a device (exit 1 if a case is wrong)")
    p.add_argument("--device", default="cpu", help="the device to validate (default: cpu)")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help="precision the cases run at")
    p.add_argument("--ops", default="", help="comma-separated op types to validate (default: all)")
    p.add_argument("--pattern", default=None, help="glob on case names, e.g. 'test_conv*'")
    p.add_argument("--report", type=output_file(".json", ".html", ".htm"), default=None,
                   help="write a report (.json, or .html with sortable tables and a chart)")
    p.add_argument("-v", "--verbose", action="store_true", help="list every non-passing case")
    add_quiet(p)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("accuracy", help="accuracy of reduced precisions against fp32 on the same inputs")
    p.add_argument("model", help="an .onnx file, or zoo:<name>[?weights=random&seed=N]")
    p.add_argument("--precision", type=precision_list, default="fp16,int8,uint8",
                   help="comma-separated precisions to compare with fp32 (default: fp16,int8,uint8)")
    p.add_argument("--data", default=None, help=".npz of input arrays, samples first (default: 8 seeded random inputs)")
    p.add_argument("--labels", default=None, help=".npy of one label per sample of --data (adds accuracy)")
    p.add_argument("--device", default="cpu", help="comma-separated device list in priority order")
    p.add_argument("--calibration", default="minmax", choices=["minmax", "percentile", "entropy"],
                   help="how quantized precisions calibrate their ranges (default: minmax)")
    p.add_argument("--batch", type=positive_int, default=32, help="samples per run with --data (default: 32)")
    p.add_argument("--seed", type=natural_int, default=0, help="seed of the random inputs (default: 0)")
    p.add_argument("--min-top1", type=fraction, default=None,
                   help="exit 1 when a precision's top-1 agreement with fp32 is below this (0..1)")
    p.add_argument("--min-cosine", type=fraction, default=None,
                   help="exit 1 when a precision's cosine similarity to fp32 is below this (0..1)")
    p.add_argument("--html", type=output_file(".html", ".htm"), default=None,
                   help="also write an HTML report (sortable table, a chart of the agreement)")
    add_quiet(p)
    p.set_defaults(func=cmd_accuracy)
    add_batch_parser(sub)
    sub.add_parser("bench", help="benchmark nnhal against onnxruntime (see nnhal bench --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        # the benchmark has its own parser; hand it the rest of the line untouched
        from nnhal.benchmark.run import main as bench_main

        return guarded(lambda: bench_main(argv[1:]))
    args = build_parser().parse_args(argv)
    return guarded(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
