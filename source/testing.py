"""The device kit: the checks nnhal's own devices pass, for a device author's pytest.

    import pytest
    from nnhal import testing

    DEVICE = "mydev"        # registered by nnhal.init() (entry point, NNHAL_DEVICE_PATH or built in)

    @pytest.mark.parametrize("case", testing.conformance_cases(DEVICE), ids=str)
    def test_conformance(case):
        testing.check_case(DEVICE, case)

    def test_hook_order():
        testing.check_hook_order(DEVICE)

    def test_boundaries():
        testing.check_boundaries(DEVICE)

    def test_fallback():
        testing.check_fallback(DEVICE)

    def test_concurrent_runs():
        testing.check_concurrent_runs(DEVICE)

Five capabilities, each a test of its own (IREE's CTS): the ONNX backend node
suite restricted to the ops and precisions the device describes, run strictly
on the device (no CPU to hide behind); the order in which the core calls every
hook the device fills; subgraph boundaries (graph inputs, constants, tensors
exchanged with the CPU, graph outputs produced mid-subgraph) against the CPU's
results; fallback to the CPU when the device's ``pre_run`` or ``run``
fails; and one Session run from several threads at once. A check that does
not apply is skipped with its reason, never silently.
Failures are AssertionErrors whose message says what went wrong.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import numpy as np

import nnhal
from nnhal.api import FALLBACK_DEVICE
from nnhal.device.device import Device
from nnhal.device.manager import register_device, unregister_device
from nnhal.serializer.onnx_export import export_node, export_subgraph  # noqa: F401 (the kit's export helper)

# The moment of first call of each hook, in lifecycle order (run, async_run and async_wait excepted:
# which of them comes first depends on the scheduler's choice; profile comes with nnhal.profile, after a
# first run).
LIFECYCLE = ("init", "describe", "evaluation", "split_graph", "optimize_graph", "scheduler.prerun", "allocate",
             "pre_run", "scheduler.run", "async_run", "async_wait", "run", "profile", "scheduler.postrun",
             "post_run", "release", "release_graph", "release_device")
_RUN_HOOKS = frozenset({"run", "async_run", "async_wait"})
# Ops the boundary and fallback models are built from, with their numpy meaning known to the CPU device.
UNARY_OPS = ("Relu", "Abs", "Neg", "Sigmoid", "Tanh", "Identity")
BINARY_OPS = ("Add", "Mul", "Sub", "Max", "Min", "MatMul")
FP32_TOLERANCE = dict(rtol=1e-5, atol=1e-5)


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


def check_case(device: str, case: Any, precision: str | None = None) -> None:
    """Run one backend case strictly on the device (no CPU fallback, so every node ran on it) at
    ``precision`` (default: the first the device describes). A reasoned rejection (evaluation,
    unsupported dtype) skips the test with that reason; a wrong output or a crash fails it."""
    from nnhal.conformance.runner import ERROR, UNSUPPORTED, WRONG, run_case

    precision = precision or find_device(device).describe().precisions[0]
    result = run_case(case, device, precision, strict=True)
    if result.status == UNSUPPORTED:
        _skip(f"{case.name}: {result.reason}")
    elif result.status in (WRONG, ERROR):
        raise AssertionError(f"{case.name} on '{device}' at {precision}: {result.status}: {result.reason}")


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


def _compare(device: str, got: list[np.ndarray], want: list[np.ndarray], precision: str) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        if precision in ("fp32", "fp16"):
            tol = FP32_TOLERANCE if precision == "fp32" else dict(rtol=5 * 2.0 ** -10, atol=5 * 2.0 ** -10)
        else:
            step = float(np.ptp(w)) / 255.0 if w.size else 0.0
            tol = dict(rtol=0.0, atol=2 * step)     # quantized: off by one step on each side
        if g.shape != w.shape or not np.allclose(g, w, **tol):
            raise AssertionError(f"output {i} on '{device}' at {precision} differs from the CPU's: "
                                 f"max |diff| {np.max(np.abs(g - w)) if g.shape == w.shape else 'shape'} "
                                 f"(tolerance {tol})")


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
    _compare(device, got, _reference(model, feeds), precision)


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
        _compare(device, got, want, _precision(record))


def check_concurrent_runs(device: str, threads: int = 4, runs: int = 5) -> None:
    """One Session on the device run from ``threads`` threads at once, each with its own inputs: every
    output equals the one-thread output for the same input (a device that declares itself reentrant
    must keep per-run state out of shared objects; one that does not is serialised by the core)."""
    from concurrent.futures import ThreadPoolExecutor

    record = find_device(device)
    model, feeds, pins = _boundary_model(device, record)
    rng = np.random.default_rng(1)
    inputs = [{"x": rng.standard_normal((4, 4)).astype(np.float32)} for _ in range(threads * runs)]
    with _session(model, device, pins, _precision(record)) as s:
        alone = [s.run(f) for f in inputs]
        with ThreadPoolExecutor(max_workers=threads) as pool:
            together = list(pool.map(s.run, inputs))
    for i, (a, b) in enumerate(zip(alone, together)):
        for k, (x, y) in enumerate(zip(a, b)):
            if not np.array_equal(x, y):
                raise AssertionError(f"run {i} of {len(inputs)} on '{device}' from {threads} threads: output {k} "
                                     "differs from the same input run alone (per-run state shared between runs?)")


__all__ = ["LIFECYCLE", "check_boundaries", "check_call_order", "check_case", "check_concurrent_runs",
           "check_fallback", "check_hook_order", "conformance_cases", "filled_hooks", "first_calls", "recording"]
