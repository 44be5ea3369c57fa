"""The device kit: the checks nnhal's own devices pass, for a device author's pytest.

    import pytest
    from nnhal import testing

    DEVICE = "mydev"        # registered by nnhal.init() (entry point, NNHAL_DEVICE_PATH or built in)

    @pytest.mark.parametrize("constant_weights", [False, True])
    @pytest.mark.parametrize("case", testing.conformance_cases(DEVICE), ids=str)
    def test_conformance(case, constant_weights):
        testing.check_case(DEVICE, case, constant_weights=constant_weights)

    @pytest.mark.parametrize("check", ["check_hook_order", "check_boundaries", "check_fallback",
                                       "check_concurrent_runs", "check_output_ownership", "check_api_version"])
    def test_capability(check):
        getattr(testing, check)(DEVICE)

    def test_lifetime():
        testing.check_lifetime(DEVICE, live=lambda device: device.privacy.live_objects)   # live: optional

    def test_random_graphs():
        testing.check_random_graphs(DEVICE, seeds=range(20))

Each capability is a test of its own (IREE's CTS): the ONNX backend node suite restricted to the ops and
precisions the device describes, run strictly on the device (no CPU to hide behind), with the weights as
graph inputs and, in constant-weights mode, as initializers; the order in which the core calls every hook
the device fills; subgraph boundaries (graph inputs, constants, tensors exchanged with the CPU, graph
outputs produced mid-subgraph) against the CPU's results; fallback to the CPU when the device's ``pre_run``
or ``run`` fails; one Session run from several threads at once; output ownership (a returned array never
changes, no two runs share one); lifetime (every hook that opens something is balanced by the one that
closes it, compiled graphs are freed, the device's own live-object count returns to zero); the declared
device API version against the hooks filled; random graphs against the CPU reference kernels, minimised,
with a replay line. Outputs are compared under one policy per precision (conformance/tolerance.py
``kit_policy``): at fp32 an ordinary op must be within NNAPI's numbers, so an output scaled by 1.001 fails.
A check that does not apply is skipped with its reason, never silently. Failures are AssertionErrors whose
message says what went wrong. ``first_divergence`` names the first node a device computes differently from
the host reference kernels (docs/device-guide.md, "Debugging a wrong output").
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import numpy as np

import nnhal
from nnhal.conformance.divergence import Divergence, first_divergence
from nnhal.conformance.tolerance import Tolerance, compare, kit_policy, quantized_atol
from nnhal.device.device import Device
from nnhal.device.manager import FALLBACK_DEVICE, register_device, unregister_device
from nnhal.serializer.onnx_export import export_node, export_subgraph  # noqa: F401 (the kit's export helper)

# The moment of first call of each hook, in lifecycle order (run, async_run and async_wait excepted:
# which of them comes first depends on the scheduler's choice; profile comes with nnhal.profile, after a
# first run).
LIFECYCLE = ("init", "describe", "evaluation", "split_graph", "optimize_graph", "scheduler.prerun", "allocate",
             "pre_run", "scheduler.direct", "scheduler.run", "async_run", "async_wait", "run", "profile",
             "scheduler.postrun", "post_run", "release", "release_graph", "release_device")
_RUN_HOOKS = frozenset({"run", "async_run", "async_wait"})
# Ops the boundary and fallback models are built from, with their numpy meaning known to the CPU device.
UNARY_OPS = ("Relu", "Abs", "Neg", "Sigmoid", "Tanh", "Identity")
BINARY_OPS = ("Add", "Mul", "Sub", "Max", "Min", "MatMul")


def find_device(name: str) -> Device:
    """The registered device of that name, after nnhal.init() (plugins are registered there)."""
    from nnhal.device.manager import find_device as registered

    nnhal.init()
    return registered(name)


def _skip(reason: str) -> None:
    import pytest

    pytest.skip(reason)


# --------------------------------------------------------------- recording
def recording(device: Device, calls: list[tuple[str, str]], name: str | None = None) -> Device:
    """A copy of ``device`` (renamed ``name``) whose every filled hook appends ``(hook, name)`` to
    ``calls`` and then calls the original. Scheduler hooks are labelled ``scheduler.<hook>``."""
    name = name or device.name

    def wrap(label: str, fn: Callable) -> Callable:
        def hook(*args: Any) -> Any:
            calls.append((label, name))
            return fn(*args)
        return hook

    def table(record: Any, prefix: str = "") -> Any:
        if record is None:
            return None
        hooks = {f.name: wrap(prefix + f.name, getattr(record, f.name)) for f in dataclasses.fields(record)
                 if f.name != "name" and getattr(record, f.name) is not None}
        return dataclasses.replace(record, **hooks)

    return dataclasses.replace(device, name=name, interface=table(device.interface),
                               allocator=table(device.allocator), optimizer=table(device.optimizer),
                               scheduler=table(device.scheduler, "scheduler."), privacy=_fresh(device.privacy))


def _fresh(privacy: object) -> object:
    """The private state for a second instance of a record: a deep copy when it can be copied."""
    try:
        return copy.deepcopy(privacy)
    except Exception:  # NOTE: handles to drivers may refuse copying; the instances then share them
        return privacy


def filled_hooks(device: Device) -> list[str]:
    """The labels of the hooks a record fills, in lifecycle order."""
    filled = {"describe"} if device.allocator is not None else set()
    for record, prefix in ((device.interface, ""), (device.allocator, ""), (device.optimizer, ""),
                           (device.scheduler, "scheduler.")):
        if record is not None:
            filled |= {prefix + f.name for f in dataclasses.fields(record)
                       if f.name != "name" and getattr(record, f.name) is not None}
    return [h for h in LIFECYCLE if h in filled]


def first_calls(calls: list[tuple[str, str]], device: str | None = None) -> list[str]:
    """Hook labels in the order of their first call (optionally of one device)."""
    seen: list[str] = []
    for label, dev in calls:
        if (device is None or dev == device) and label not in seen:
            seen.append(label)
    return seen


def check_call_order(calls: list[tuple[str, str]], filled: list[str], device: str | None = None) -> None:
    """Every hook in ``filled`` was called, and their first calls follow the lifecycle order."""
    order = first_calls(calls, device)
    missing = [h for h in filled if h not in order]
    if missing:
        raise AssertionError(f"hooks filled but never called: {missing} (called, in order: {order})")
    timeline = [h for h in LIFECYCLE if h in order]
    for earlier, later in zip(timeline, timeline[1:]):
        if {earlier, later} & _RUN_HOOKS:
            continue
        if order.index(earlier) > order.index(later):
            raise AssertionError(f"hook '{later}' was first called before '{earlier}': {order}")


def check_hook_order(device: str) -> None:
    """Register two recording copies of a registered device, run the boundary model on the first with an
    independent branch on the second (so that async hooks, when filled, are used), unregister them, and
    check that every hook the device fills was called, first calls in lifecycle order (a profile of one
    run follows the run, so that the optional ``profile`` hook is called too)."""
    original = find_device(device)
    calls: list[tuple[str, str]] = []
    first, second = f"{device}kit", f"{device}kitb"
    model, feeds, pins = _boundary_model(device, original, side=True)
    pins = {**_renamed(pins, device, first), "side": second}
    register_device(recording(original, calls, first))
    try:
        register_device(recording(original, calls, second))
        try:
            with nnhal.Session(model, devices=[first, second, FALLBACK_DEVICE], pins=pins,
                               precision=_precision(original)) as s:
                s.run(feeds)
                s.profile(feeds, runs=1, warmup=0)
                if s.fallbacks:
                    raise AssertionError(f"'{device}' failed while recorded: {[f.describe() for f in s.fallbacks]}")
            # NOTE: whether the run above used async_run or run depends on timing (async is chosen only
            # while other work is ready or in flight); the same model without the side branch leaves
            # nothing to overlap at any moment, so the scheduler calls run
            plain, plain_feeds, plain_pins = _boundary_model(device, original, side=False)
            with nnhal.Session(plain, devices=[first, FALLBACK_DEVICE], pins=_renamed(plain_pins, device, first),
                               precision=_precision(original)) as s:
                s.run(plain_feeds)
        finally:
            unregister_device(second)
    finally:
        unregister_device(first)
    check_call_order(calls, filled_hooks(original))


# ------------------------------------------------------------- conformance
def conformance_cases(device: str, ops: list[str] | None = None) -> list:
    """ONNX backend node cases whose every op the device describes (optionally only those naming ``ops``)."""
    from nnhal.conformance.runner import all_cases

    described = find_device(device).describe().ops
    wanted = (set(ops) if ops else set(described)) & described
    selected = []
    for case in all_cases():
        ops_of_case = {n.op_type for n in case.model.graph.node}
        if wanted & ops_of_case and ops_of_case <= described:
            selected.append(case)
    return selected


def check_case(device: str, case: Any, precision: str | None = None, constant_weights: bool = False) -> None:
    """Run one backend case strictly on the device (no CPU fallback, so every node ran on it) at
    ``precision`` (default: the first the device describes), compared under the kit's tolerance policy
    (conformance/tolerance.py ``kit_policy``: never the case's own, looser, one). ``constant_weights``: the
    case's weight inputs become initializers first, as in a deployed model (a device taking constant
    weights only declines every Conv and Gemm case otherwise). A reasoned rejection (evaluation,
    unsupported dtype) skips the test with that reason; a wrong output or a crash fails it."""
    from nnhal.conformance.runner import ERROR, UNSUPPORTED, WRONG, run_case

    precision = precision or find_device(device).describe().precisions[0]
    result = run_case(case, device, precision, strict=True, constant_weights=constant_weights)
    mode = " with constant weights" if constant_weights else ""
    if result.status == UNSUPPORTED:
        _skip(f"{case.name}{mode}: {result.reason}")
    elif result.status in (WRONG, ERROR):
        raise AssertionError(f"{case.name}{mode} on '{device}' at {precision}: {result.status}: {result.reason}")


def weights_coverage(device: str, ops: list[str] | None = None, precision: str | None = None) -> dict[str, dict]:
    """Per op, how many of the device's conformance cases it ran itself (strictly, outputs right), with the
    weights as graph inputs and as initializers: ``{op: {"inputs": n, "constant": n, "cases": n}}``."""
    from nnhal.conformance.runner import PASS, run_case

    precision = precision or find_device(device).describe().precisions[0]
    table: dict[str, dict] = {}
    for case in conformance_cases(device, ops):
        ran = {mode: run_case(case, device, precision, strict=True, constant_weights=mode == "constant").status
               == PASS for mode in ("inputs", "constant")}
        for op in {n.op_type for n in case.model.graph.node}:
            row = table.setdefault(op, {"inputs": 0, "constant": 0, "cases": 0})
            row["cases"] += 1
            for mode, ok in ran.items():
                row[mode] += int(ok)
    return dict(sorted(table.items()))


# --------------------------------------------------------- boundaries, fallback
def _boundary_model(device: str, record: Device,
                    side: bool = False) -> tuple[Any, dict[str, np.ndarray], dict[str, str]]:
    """A model crossing the device's boundary every way: a graph input, a constant, a tensor to and
    from the CPU, a graph output produced in the middle of the device's subgraph.

        a = U(x)        device      (a is also a graph output, and read by the CPU)
        b = U(a)        cpu         (pinned)
        c = B(a, b)     device      (inputs from its own earlier subgraph and from the CPU; c is a graph
                                     output read again inside its subgraph)
        y = B(c, k)     device      (k a constant initializer)
        s = U(x)        with ``side``: an independent branch, to be pinned elsewhere
    """
    from onnx import TensorProto, helper, numpy_helper

    desc = record.describe()
    unary = next((op for op in UNARY_OPS if op in desc.ops), None)
    binary = next((op for op in BINARY_OPS if op in desc.ops), None)
    if binary is None:
        _skip(f"'{device}' describes none of {BINARY_OPS}; the boundary model is built from one of them")

    def apply_unary(out: str, src: str, name: str) -> Any:
        if unary is not None:
            return helper.make_node(unary, [src], [out], name=name)
        return helper.make_node(binary, [src, src], [out], name=name)

    nodes = [apply_unary("a", "x", "first"), apply_unary("b", "a", "on_cpu"),
             helper.make_node(binary, ["a", "b"], ["c"], name="join"),
             helper.make_node(binary, ["c", "k"], ["y"], name="with_constant")]
    k = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), "k")
    outputs = ("x", "y", "a", "c", "s") if side else ("x", "y", "a", "c")
    if side:
        nodes.insert(1, apply_unary("s", "x", "side"))
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4]) for n in outputs]
    graph = helper.make_graph(nodes, "boundaries", info[:1], info[1:], [k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    return model, {"x": x}, {"on_cpu": FALLBACK_DEVICE, "first": device, "join": device, "with_constant": device}


def _session(model: Any, device: str, pins: dict[str, str], precision: str) -> nnhal.Session:
    """A Session on ``device`` with the CPU behind it (once, when the device is the CPU itself)."""
    return nnhal.Session(model, devices=list(dict.fromkeys([device, FALLBACK_DEVICE])), pins=pins, precision=precision)


def _renamed(pins: dict[str, str], old: str, new: str) -> dict[str, str]:
    return {node: (new if target == old else target) for node, target in pins.items()}


def _precision(record: Device) -> str:
    precisions = record.describe().precisions
    return "fp32" if "fp32" in precisions else precisions[0]


def _compare(device: str, got: list[np.ndarray], want: list[np.ndarray], precision: str, model: Any) -> None:
    """Outputs against the CPU's under the kit's policy (conformance/tolerance.py: kit_policy for ``model``'s ops,
    quantized_atol under a quantized precision)."""
    ops = {n.op_type for n in model.graph.node}
    for i, (g, w) in enumerate(zip(got, want)):
        tol = kit_policy(precision, ops)
        if precision not in ("fp32", "fp16"):
            tol = Tolerance(atol=quantized_atol([w]), rtol=0.0, int_off_by=1)
        why = compare(g, w, tol)
        if why:
            raise AssertionError(f"output {i} on '{device}' at {precision} differs from the CPU's: {why}")


def _reference(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with nnhal.Session(model, devices=[FALLBACK_DEVICE]) as s:
        return s.run(feeds)


def check_boundaries(device: str) -> None:
    """The boundary model on the device (one node pinned to the CPU) gives the CPU's outputs, and the
    device runs every node that was not pinned away."""
    record = find_device(device)
    model, feeds, pins = _boundary_model(device, record)
    precision = _precision(record)
    with _session(model, device, pins, precision) as s:
        got = s.run(feeds)
        placed = {n: d.device for n, d in s.placement.items()}
        if s.fallbacks:
            raise AssertionError(f"'{device}' failed on the boundary model: {[f.describe() for f in s.fallbacks]}")
    if placed != pins:
        raise AssertionError(f"placement {placed} is not the pinned {pins}")
    _compare(device, got, _reference(model, feeds), precision, model)


def _failing(record: Device, stage: str, name: str) -> Device:
    """A copy of ``record`` named ``name`` whose ``stage`` hook (pre_run or run) raises."""
    def fail(*args: Any) -> None:
        raise RuntimeError(f"injected {stage} fault")

    interface = dataclasses.replace(record.interface, **{stage: fail})
    if stage == "run":       # an async device must fail too
        interface = dataclasses.replace(interface, async_run=None, async_wait=None)
    return dataclasses.replace(record, name=name, interface=interface, privacy=_fresh(record.privacy))


def check_fallback(device: str) -> None:
    """A copy of the device whose pre_run, then run, raises: the core re-places its subgraphs on the
    CPU, reports a fallback naming the stage, still gives the CPU's outputs, and calls the device's
    release hooks (its copy is unregistered cleanly afterwards)."""
    record = find_device(device)
    model, feeds, pins = _boundary_model(device, record)
    want = _reference(model, feeds)
    name = f"{device}fail"
    for stage in ("pre_run", "run"):
        register_device(_failing(record, stage, name))
        try:
            with _session(model, name, _renamed(pins, device, name), _precision(record)) as s:
                got = s.run(feeds)
                stages = {(f.device, f.stage) for f in s.fallbacks}
        finally:
            unregister_device(name)
        if stages != {(name, stage)}:
            raise AssertionError(f"a failing {stage} on '{device}' gave the fallbacks {sorted(stages)}, "
                                 f"expected {[(name, stage)]}")
        _compare(device, got, want, _precision(record), model)


def check_concurrent_runs(device: str, threads: int = 4, runs: int = 5) -> None:
    """One Session on the device run from ``threads`` threads at once, each with its own inputs: every
    output (copied as its run returns) equals the one-thread output for the same input, and no two runs
    returned arrays sharing memory (a device that declares itself reentrant must keep per-run state out
    of shared objects; one that does not is serialised by the core)."""
    from concurrent.futures import ThreadPoolExecutor

    record = find_device(device)
    model, feeds, pins = _boundary_model(device, record)
    rng = np.random.default_rng(1)
    inputs = [{"x": rng.standard_normal((4, 4)).astype(np.float32)} for _ in range(threads * runs)]

    def run(f: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        got = s.run(f)
        return got, [a.copy() for a in got]

    with _session(model, device, pins, _precision(record)) as s:
        alone = [run(f)[1] for f in inputs]
        with ThreadPoolExecutor(max_workers=threads) as pool:
            returned = list(pool.map(run, inputs))
        names = s.output_names
    for i, (a, (_, b)) in enumerate(zip(alone, returned)):
        for k, (x, y) in enumerate(zip(a, b)):
            if not np.array_equal(x, y, equal_nan=True):
                raise AssertionError(f"run {i} of {len(inputs)} on '{device}' from {threads} threads: output {k} "
                                     "differs from the same input run alone (per-run state, such as input "
                                     "staging buffers, shared between runs of a reentrant device?)")
    _check_no_aliasing(device, names, [r for r, _ in returned], {"x"})


def _check_no_aliasing(device: str, names: list[str], runs: list[list[np.ndarray]], inputs: set[str]) -> None:
    """No output array of one run shares memory with an output of another run (graph inputs excepted)."""
    for k, name in enumerate(names):
        if name in inputs:
            continue
        for i in range(len(runs)):
            for j in range(i + 1, len(runs)):
                if np.shares_memory(runs[i][k], runs[j][k]):
                    raise AssertionError(
                        f"output '{name}' of runs {i} and {j} on '{device}' share memory: the device writes its "
                        "outputs into buffers it reuses across runs; write fresh arrays, or declare "
                        "Description(reuses_outputs=True) so that the core copies them")


def check_output_ownership(device: str, runs: int = 3) -> None:
    """Arrays returned by ``Session.run`` on the device never change in later runs, and no two runs return
    arrays sharing memory (docs/device-guide.md, "Who owns the outputs")."""
    record = find_device(device)
    model, feeds, pins = _boundary_model(device, record)
    rng = np.random.default_rng(2)
    with _session(model, device, pins, _precision(record)) as s:
        first = s.run(feeds)
        kept = [a.copy() for a in first]
        later = [s.run({"x": rng.standard_normal((4, 4)).astype(np.float32)}) for _ in range(runs)]
        names = s.output_names
    for name, got, want in zip(names, first, kept):
        if not np.array_equal(got, want, equal_nan=True):
            raise AssertionError(f"output '{name}' returned by a run on '{device}' changed during {runs} later runs: "
                                 "the device reuses its output buffers; write fresh arrays in run, or declare "
                                 "Description(reuses_outputs=True) so that the core copies them")
    _check_no_aliasing(device, names, [first, *later], set(feeds))


# ------------------------------------------------------------------ lifetime
@dataclasses.dataclass
class Lifetime:
    """What a counting copy of a device saw: calls per hook, the compiled graphs pre_run built and those
    release_graph got (by id), weak references to the built ones where they take one."""

    calls: dict[str, int] = dataclasses.field(default_factory=dict)
    built: dict[int, str] = dataclasses.field(default_factory=dict)
    released: list[int] = dataclasses.field(default_factory=list)
    alive: list[tuple[str, Any]] = dataclasses.field(default_factory=list)


def counting(device: Device, life: Lifetime, name: str) -> Device:
    """A copy of ``device`` named ``name`` whose lifecycle hooks count their calls into ``life`` and whose
    pre_run / release_graph record the compiled graph they built / got."""
    import weakref

    def wrap(hook: str, fn: Callable | None) -> Callable | None:
        if fn is None:
            return None

        def counted(*args: Any) -> Any:
            life.calls[hook] = life.calls.get(hook, 0) + 1
            if hook == "release_graph":
                life.released.append(id(args[1]))
            result = fn(*args)
            if hook == "pre_run" and args[1].device_graph is not None:
                graph = args[1].device_graph
                life.built[id(graph)] = f"subgraph #{args[1].index}"
                try:
                    life.alive.append((f"subgraph #{args[1].index}", weakref.ref(graph)))
                except TypeError:  # NOTE: dicts, lists, tuples take no weak reference: counted only
                    pass
            return result
        return counted

    iface, alloc = device.interface, device.allocator
    interface = dataclasses.replace(iface, **{h: wrap(h, getattr(iface, h)) for h in
                                               ("init", "pre_run", "release_graph", "release_device")})
    allocator = None if alloc is None else dataclasses.replace(
        alloc, allocate=wrap("allocate", alloc.allocate), release=wrap("release", alloc.release))
    return dataclasses.replace(device, name=name, interface=interface, allocator=allocator,
                               privacy=_fresh(device.privacy))


def check_lifetime(device: str, live: Callable[[Device], int] | None = None) -> None:
    """A counting copy of the device runs the boundary model through the whole lifecycle (prepare, runs,
    prepare again, a second graph, destroy, unregister); then init / release_device, allocate / release
    and pre_run / release_graph balance, every compiled graph pre_run built was released once and (where it
    takes a weak reference) is freed, and ``live(device)``, the device's own count of live objects when it
    offers one (compiled graphs, buffers), is back to zero after the graphs are destroyed."""
    import gc

    record = find_device(device)
    life = Lifetime()
    name = f"{device}life"
    model, feeds, pins = _boundary_model(device, record)
    pins = _renamed(pins, device, name)
    copy_ = counting(record, life, name)
    register_device(copy_)
    try:
        ctx = nnhal.create_context("lifetime", list(dict.fromkeys([name, FALLBACK_DEVICE])), pins=pins)
        options = nnhal.Options(precision=_precision(record))
        graphs = [nnhal.create_graph(ctx, "onnx", model) for _ in range(2)]
        for g in graphs:
            nnhal.set_graph_input(g, "x", feeds["x"])
            nnhal.prerun_graph(g, options)
            nnhal.run_graph(g)
        nnhal.prerun_graph(graphs[0], options)      # prepared again: the first preparation is released
        nnhal.run_graph(graphs[0])
        for g in graphs:
            nnhal.postrun_graph(g)
            nnhal.destroy_graph(g)
        del graphs
        gc.collect()
        remaining = live(copy_) if live is not None else 0
    finally:
        unregister_device(name)
    problems = []
    c = life.calls
    pairs = (("init", "release_device", record.interface), ("allocate", "release", record.allocator),
             ("pre_run", "release_graph", record.interface))
    for opened, closed, table in pairs:
        n_open = len(life.built) if opened == "pre_run" else c.get(opened, 0)
        if n_open and getattr(table, closed, None) is not None and n_open != c.get(closed, 0):
            what = "compiled graphs built by pre_run" if opened == "pre_run" else f"{opened} called"
            problems.append(f"{what} {n_open} time(s) but {closed} called {c.get(closed, 0)}")
    unreleased = [where for key, where in life.built.items() if key not in life.released]
    if unreleased and record.interface.release_graph is not None:
        problems.append(f"compiled graphs of {unreleased} never given to release_graph")
    gc.collect()
    leaked = [where for where, ref in life.alive if ref() is not None]
    if leaked:
        problems.append(f"compiled graphs of {sorted(set(leaked))} still alive after release_graph and destroy "
                        "(held by the device's own state?)")
    if remaining:
        problems.append(f"the device's live-object count is {remaining} after every graph was destroyed, "
                        "expected 0 (release_graph or release does not free?)")
    if problems:
        raise AssertionError(f"lifetime of '{device}': " + "; ".join(problems))


# --------------------------------------------------------------- api version
def check_api_version(device: str) -> None:
    """The device API version the device declared (``NNHAL_DEVICE_API``; built-in devices: the core's)
    has every hook and Description field it fills (nnhal.device.device.SINCE)."""
    from nnhal.device.device import newer_than_declared
    from nnhal.device.manager import device_status

    record = find_device(device)
    declared = next((st.api for st in device_status() if st.name == device and st.available), None)
    if declared is None:
        _skip(f"'{device}' has no recorded device API version")
    newer = newer_than_declared(record, declared)
    if newer:
        raise AssertionError(f"'{device}' declares device API {declared[0]}.{declared[1]} but fills "
                             f"{', '.join(newer)}: declare the version it was written against")


# --------------------------------------------------------------- random graphs
def check_random_graphs(device: str, seeds: Any = range(10), precision: str | None = None,
                        ops: list[str] | None = None, max_nodes: int = 8) -> None:
    """Random graphs of the ops the device describes (nnhal.conformance.random_graph), on the device and on
    the CPU reference kernels, compared under the kit's policy: fails listing every mismatch minimised to
    its smallest failing cone of nodes, each with the line that replays it."""
    from nnhal.conformance.random_graph import GENERATORS, differential

    described = find_device(device).describe().ops
    if not set(ops or described) & described & set(GENERATORS):
        _skip(f"'{device}' describes none of the random-graph generators' ops {sorted(GENERATORS)}")
    found = differential(device, seeds, precision, ops, max_nodes)
    if found:
        raise AssertionError(f"{len(found)} random graph(s) differ on '{device}':\n" + "\n".join(map(str, found)))


__all__ = ["LIFECYCLE", "Divergence", "Lifetime", "check_api_version", "check_boundaries", "check_call_order",
           "check_case", "check_concurrent_runs", "check_fallback", "check_hook_order", "check_lifetime",
           "check_output_ownership", "check_random_graphs", "conformance_cases", "counting", "filled_hooks",
           "first_calls", "first_divergence", "recording", "weights_coverage"]
