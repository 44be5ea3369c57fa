"""`nnhal` command line: devices, run, registry, validate."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from nnhal.errors import NnhalError


def cmd_devices(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal import registry

    nnhal.init()
    registered = {d.name: d for d in nnhal.devices()}
    print(f"{'device':8s} {'option':22s} {'state':11s} {'precisions':22s} {'ops':>4s}  description")
    for entry in registry.ALL_DEVICES:
        dev = registered.get(entry.name)
        summary = ""
        if dev is not None:
            desc = dev.describe()
            precisions, ops = ",".join(desc.precisions), str(len(desc.ops))
            # NOTE: a registered device that describes no ops is unavailable (e.g. no GPU); its summary says why
            state = "registered" if desc.ops else "unavailable"
            summary = desc.summary
        else:
            precisions, ops, state = "-", "-", "on" if entry.enabled else "off"
        print(f"{entry.name:8s} {entry.option + ('=ON' if entry.enabled else '=OFF'):22s} {state:11s} "
              f"{precisions:22s} {ops:>4s}  {entry.description}")
        if summary:
            print(f"{'':8s} {summary}")
    return 0


def _parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    feeds = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise SystemExit(f"--input takes name=file.npy, got '{spec}'")
        feeds[name] = np.load(path)
    return feeds


def cmd_run(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.zoo import input_for, resolve

    model = resolve(args.model)
    devices = [d for d in args.device.split(",") if d]
    t0 = time.perf_counter()
    session = nnhal.Session(model, devices=devices, precision=args.precision, num_thread=args.num_thread)
    created = time.perf_counter() - t0
    import onnx

    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)
    feeds = input_for(proto, seed=args.seed)
    feeds.update(_parse_inputs(args.input))
    t0 = time.perf_counter()
    outputs = session.run(feeds)
    first = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        outputs = session.run(feeds)
        times.append(time.perf_counter() - t0)
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
    counts: dict[str, int] = {}
    for decision in session.placement.values():
        counts[decision.device] = counts.get(decision.device, 0) + 1
    print(f"placement: {', '.join(f'{d}: {n} nodes' for d, n in counts.items())}; "
          f"{len(session.subgraphs)} subgraph(s)")
    for event in session.fallbacks:
        print(f"fallback: {event.describe()}")
    print(f"session creation {created * 1e3:.1f} ms; first run (incl. prerun) {first * 1e3:.1f} ms")
    if times:
        print(f"latency over {len(times)} runs: median {np.median(times) * 1e3:.2f} ms, "
              f"min {min(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms")
    session.close()
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    import onnx

    import nnhal
    from nnhal.zoo import input_for, resolve

    model = resolve(args.model)
    devices = [d for d in args.device.split(",") if d]
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)
    feeds = input_for(proto, seed=args.seed)
    feeds.update(_parse_inputs(args.input))
    with nnhal.Session(model, devices=devices, precision=args.precision, num_thread=args.num_thread) as session:
        prof = session.profile(feeds, runs=args.runs, warmup=args.warmup)
    print(f"model: {args.model}  devices: {args.device}  precision: {args.precision}")
    print(prof.table(args.top), end="")
    return 0


def cmd_placement(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.zoo import resolve

    report = nnhal.explain(resolve(args.model), devices=[d for d in args.device.split(",") if d],
                           precision=args.precision, min_group_size=args.min_group_size)
    print(report)
    return 0


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
    return validate_main(argv)


def cmd_accuracy(args: argparse.Namespace) -> int:
    import onnx

    from nnhal.accuracy import compare_precisions, format_report
    from nnhal.zoo import input_for, resolve

    model = resolve(args.model)
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)
    inits = {i.name for i in proto.graph.initializer}
    input_names = [i.name for i in proto.graph.input if i.name not in inits]
    if args.data:
        with np.load(args.data) as npz:
            arrays = {k: npz[k] for k in npz.files}
        if len(input_names) == 1 and input_names[0] not in arrays and len(arrays) == 1:
            arrays = {input_names[0]: next(iter(arrays.values()))}
        missing = [n for n in input_names if n not in arrays]
        if missing:
            raise SystemExit(f"--data {args.data} lacks the model inputs {missing} (it holds {sorted(arrays)})")
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
    report = compare_precisions(model, feeds, [p for p in args.precision.split(",") if p],
                                [d for d in args.device.split(",") if d], labels,
                                calibration_method=args.calibration, calibration_feeds=calib, progress=True)
    report.model = args.model
    print(format_report(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnhal", description="nnhal: pluggable-device ONNX inference")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list device folders, their options and what they support")
    p.set_defaults(func=cmd_devices)
    def model_run(name: str, help_text: str) -> argparse.ArgumentParser:
        """A command that runs a model: the model, its devices, precision, inputs and threads."""
        p = sub.add_parser(name, help=help_text)
        p.add_argument("model")
        p.add_argument("--device", default="cpu", help="comma-separated device list in priority order")
        p.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "int8", "uint8"])
        p.add_argument("--input", action="append", default=[], help="name=file.npy (default: seeded random)")
        p.add_argument("--num-thread", type=int, default=0)
        p.add_argument("--seed", type=int, default=0)
        return p

    p = model_run("run", "run a model (path or zoo:<name>[?weights=random]) and time it")
    p.add_argument("--repeat", type=int, default=10)
    p.set_defaults(func=cmd_run)
    p = model_run("profile", "run a model and show where the time goes, per subgraph and per node")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--top", type=int, default=20, help="slowest nodes to list")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("placement", help="explain where each node of a model would run, before compiling")
    p.add_argument("model")
    p.add_argument("--device", default="cpu", help="comma-separated device list in priority order")
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "int8", "uint8"])
    p.add_argument("--min-group-size", type=int, default=1)
    p.set_defaults(func=cmd_placement)
    p = sub.add_parser("registry", help="re-run CMake's configure step and refresh the installed device registry")
    p.add_argument("--enable", action="append", default=[], metavar="DEVICE")
    p.add_argument("--disable", action="append", default=[], metavar="DEVICE")
    p.add_argument("--source", default=None, help="source tree (default: the one the package was built from)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_registry)
    p = sub.add_parser("validate", help="run the ONNX backend node suite on a device")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--ops", default="")
    p.add_argument("--pattern", default=None)
    p.add_argument("--report", default=None, help="write a report (.json or .html)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("accuracy", help="accuracy of reduced precisions against fp32 on the same inputs")
    p.add_argument("model")
    p.add_argument("--precision", default="fp16,int8,uint8", help="comma-separated precisions to compare with fp32")
    p.add_argument("--data", default=None, help=".npz of input arrays, samples first (default: 8 seeded random inputs)")
    p.add_argument("--labels", default=None, help=".npy of one label per sample of --data (adds accuracy)")
    p.add_argument("--device", default="cpu", help="comma-separated device list in priority order")
    p.add_argument("--calibration", default="minmax", choices=["minmax", "percentile", "entropy"])
    p.add_argument("--batch", type=int, default=32, help="samples per run with --data")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_accuracy)
    sub.add_parser("bench", help="benchmark nnhal against onnxruntime (see nnhal bench --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        # the benchmark has its own parser; hand it the rest of the line untouched
        from nnhal.benchmark.run import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except NnhalError as exc:
        print(f"nnhal: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
