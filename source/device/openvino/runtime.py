"""What the openvino device asks of OpenVINO: its targets, per-node support (query_model), compilation,
infer requests bound to numpy memory, and per-layer counters mapped back to nnhal's node names.

Nothing here knows the device record; openvino_device.py holds the hooks.
"""
from __future__ import annotations

import hashlib
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import onnx
import openvino as ov

from nnhal.graph.node import Node

# node types of a converted model that are not computation (present in every query and model)
PLUMBING = frozenset({"Parameter", "Result", "Constant"})
QUERY_CACHE_SIZE = 4096
SMALL_CONSTANT = 64         # constants up to this many elements key the query cache by value (axes, shapes)


def targets(core: ov.Core) -> list[str]:
    """OpenVINO's devices here ("CPU", "GPU.0", "NPU", ...), with "AUTO" when any exists."""
    found = list(core.available_devices)
    return [*found, "AUTO"] if found else []


def has_target(available: list[str], target: str) -> bool:
    """``target`` ("GPU" matches "GPU.0") is among ``available``."""
    return any(t == target or t.split(".")[0] == target for t in available)


def half_precision(core: ov.Core, target: str) -> str | None:
    """The 16-bit inference precision ``target`` computes in ("f16" or "bf16"), or None when it has none."""
    try:
        caps = set(core.get_property(target.split(".")[0] if target != "AUTO" else "CPU",
                                     "OPTIMIZATION_CAPABILITIES"))
    except RuntimeError:
        return None
    return "f16" if "FP16" in caps else "bf16" if "BF16" in caps else None


# The widest int8 weight magnitude OpenVINO's CPU integer kernels multiply exactly: 127, or 63 where u8 x s8
# pairs are summed in 16 bits with saturation (x86 without VNNI: vpmaddubsw). Asked of the plugin, not read
# from CPU flags: a 1x1 QDQ convolution of u8 255 against s8 127 over 8 channels is 259,080 exactly and
# 131,068 (4 x 32,767) saturated (measured on an AVX2-only AMD EPYC, OpenVINO 2026.4).
FULL_LEVELS, NARROW_LEVELS = 127, 63
PROBE_CHANNELS = 8


def _probe_model() -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    w = np.full((1, PROBE_CHANNELS, 1, 1), FULL_LEVELS, np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "s1"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(1.0), "s"), numpy_helper.from_array(np.uint8(0), "z"),
             numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.float32(1.0), "s1")]
    graph = helper.make_graph(nodes, "saturation_probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, PROBE_CHANNELS, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@lru_cache(maxsize=1)
def weight_levels() -> int:
    """127 when OpenVINO's CPU plugin multiplies full int8 weights by uint8 activations exactly, else 63 (its
    kernels saturate pair sums at 16 bits; the probe runs once per process). A plugin that cannot run the
    probe gets the narrow, always-exact weights."""
    try:
        core = ov.Core()
        compiled = core.compile_model(read(core, _probe_model()), "CPU")
        got = float(np.asarray(compiled({"x": np.full((1, PROBE_CHANNELS, 2, 2), 255.0, np.float32)})[0]).max())
    except RuntimeError:
        return NARROW_LEVELS
    return FULL_LEVELS if got == 255.0 * FULL_LEVELS * PROBE_CHANNELS else NARROW_LEVELS


def first_line(exc: BaseException, limit: int = 240) -> str:
    """OpenVINO's own reason, shortened: its messages carry a stack of source locations."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith(("Check ", "/"))]
    text = " ".join(lines) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read(core: ov.Core, model: onnx.ModelProto) -> ov.Model:
    """An exported ONNX model read by OpenVINO's ONNX frontend (raises OpenVINO's error)."""
    return core.read_model(model=model.SerializeToString())


class QueryCache:
    """Support verdicts, cached at two levels (LRU-bounded, thread-safe):

    * by the node's signature (op, domain, opset, attributes, input and output dtypes and shapes, which
      inputs are constant and the values of small constants: axes, shapes, pads), so the repeated layers of
      a model cost one look-up each;
    * by what OpenVINO's frontend made of the node (the OpenVINO op types, versions, element types and
      ranks), so query_model, which costs ~0.2 s a call on the CPU plugin whatever the model's size, runs
      once per distinct OpenVINO form: every 3x3 float Conv is one Convolution + Add.
    """

    def __init__(self, size: int = QUERY_CACHE_SIZE) -> None:
        self.nodes: OrderedDict[tuple, str] = OrderedDict()
        self.forms: OrderedDict[tuple, str] = OrderedDict()
        self.lock = threading.Lock()
        self.size = size
        self.queries = 0

    def _get(self, table: OrderedDict, key: tuple) -> str | None:
        with self.lock:
            if key in table:
                table.move_to_end(key)
                return table[key]
        return None

    def _put(self, table: OrderedDict, key: tuple, why: str) -> None:
        with self.lock:
            table[key] = why
            while len(table) > self.size:
                table.popitem(last=False)

    def verdict(self, core: ov.Core, signature: tuple, model: Callable[[], onnx.ModelProto], target: str) -> str:
        """"" when OpenVINO's ``target`` runs every op the node converts to; else OpenVINO's reason.
        ``model`` exports the node (called only when the signature is new)."""
        key = (signature, target)
        why = self._get(self.nodes, key)
        if why is None:
            why = self._form_verdict(core, model(), target)
            self._put(self.nodes, key, why)
        return why

    def _form_verdict(self, core: ov.Core, model: onnx.ModelProto, target: str) -> str:
        try:
            converted = core.read_model(model=model.SerializeToString())
        except RuntimeError as exc:
            return f"OpenVINO's ONNX frontend: {first_line(exc)}"
        form = (_form(converted), target)
        why = self._get(self.forms, form)
        if why is None:
            with self.lock:
                self.queries += 1
            why = _query(core, converted, target)
            self._put(self.forms, form, why)
        return why


def _form(model: ov.Model) -> tuple:
    """OpenVINO op types (with opset), output element types and ranks of a converted model, in order."""
    return tuple((op.get_type_info().name, op.get_type_info().version_id,
                  tuple((str(op.get_output_element_type(i)), op.get_output_partial_shape(i).rank.get_length()
                         if op.get_output_partial_shape(i).rank.is_static else -1)
                        for i in range(op.get_output_size())))
                 for op in model.get_ordered_ops())


def _computes(op) -> bool:
    """Whether ``op`` reads a value that is not a constant (ops over constants only are folded away by the
    plugin, and query_model then does not name them)."""
    return op.get_type_name() not in PLUMBING and any(
        v.get_node().get_type_name() != "Constant" for v in op.input_values())


def _query(core: ov.Core, model: ov.Model, target: str) -> str:
    try:
        supported = core.query_model(model, target)
    except RuntimeError as exc:
        return f"OpenVINO {target} query_model: {first_line(exc)}"
    missing = sorted({op.get_type_name() for op in model.get_ops()
                      if _computes(op) and op.get_friendly_name() not in supported})
    if missing:
        return f"OpenVINO {target} does not support {', '.join(missing)} (query_model)"
    return ""


def signature(node: Node, inputs: list, outputs: list) -> tuple:
    """What a node's support can depend on, hashable: op, domain, opset, attributes, dtypes and shapes, which
    inputs are constant, and the values of small constants (large ones, weights, count by shape only)."""
    def info(i) -> tuple:
        if i is None:
            return ()
        value = None
        if i.value is not None:
            v = np.asarray(i.value)
            value = hashlib.sha256(v.tobytes()).hexdigest() if v.size <= SMALL_CONSTANT else "const"
        return (str(i.dtype), i.shape, value)

    return (node.op_type, node.domain, node.opset, _frozen(node.attrs),
            tuple(info(i) for i in inputs), tuple(info(o) for o in outputs))


def _frozen(value) -> object:
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.shape, hashlib.sha256(value.tobytes()).hexdigest())
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    return ("id", id(value))     # a body graph: its own identity (a node's bodies are not shared)


@dataclass
class Compiled:
    """A compiled subgraph and its pool of infer requests (one per concurrent run, made on demand)."""

    model: ov.CompiledModel
    inputs: list[str]                     # subgraph input names, in the compiled model's input order
    outputs: list[str]                    # subgraph output names, in its output order
    output_types: list[np.dtype | None]   # numpy dtype of each compiled output (None: no numpy twin)
    unbound: frozenset[str] = frozenset()  # outputs OpenVINO writes in its own memory only (copied after a run)
    pool: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    made: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> ov.InferRequest:
        try:
            return self.pool.get_nowait()
        except queue.Empty:
            with self.lock:
                self.made += 1
            return self.model.create_infer_request()

    def give(self, request: ov.InferRequest) -> None:
        self.pool.put(request)

    def requests(self) -> list[ov.InferRequest]:
        """Every idle request (drained from the pool and put back): what profiling reads."""
        taken = []
        while True:
            try:
                taken.append(self.pool.get_nowait())
            except queue.Empty:
                break
        for r in taken:
            self.pool.put(r)
        return taken


def compile_model(core: ov.Core, model: ov.Model, target: str, config: dict, inputs: list[str],
                  outputs: list[str], shapes: dict[str, tuple | None]) -> Compiled:
    compiled = core.compile_model(model, target, config)
    # NOTE: a port has a set of tensor names (the frontend may add its own); the subgraph's name is among them
    in_order = [next((n for n in inputs if n in p.get_names()), p.get_any_name()) for p in compiled.inputs]
    out_order = [next((n for n in outputs if n in p.get_names()), p.get_any_name()) for p in compiled.outputs]
    types = [_numpy_type(port.get_element_type()) for port in compiled.outputs]
    for name, port in zip(out_order, compiled.outputs):
        shape, theirs = shapes.get(name), port.get_partial_shape()
        if shape is not None and theirs.is_static and tuple(theirs.to_shape()) != tuple(shape):
            raise RuntimeError(f"OpenVINO infers output '{name}' as {tuple(theirs.to_shape())}, nnhal as "
                               f"{tuple(shape)}: the two read the model differently")
    # NOTE: OpenVINO drops a Parameter nothing reads once folded (ReduceSum's empty axes); it is not bound
    if not set(in_order) <= set(inputs) or sorted(out_order) != sorted(outputs):
        raise RuntimeError(f"the compiled model's inputs {in_order} / outputs {out_order} are not the subgraph's "
                           f"{inputs} / {outputs}")
    # NOTE: OpenVINO leaves a bound output tensor unwritten (no error) where the compiled graph passes an
    # input or a constant straight through (Max of one input, Einsum "->" of a scalar) and where the output's
    # shape is dynamic in the compiled model (Tile with its repeats an input: it allocates anew at run time)
    unbound = frozenset(name for name, port, op in zip(out_order, compiled.outputs, _results(compiled))
                        if not port.get_partial_shape().is_static
                        or op.input_value(0).get_node().get_type_name() in ("Parameter", "Constant"))
    return Compiled(compiled, in_order, out_order, types, unbound)


def _results(compiled: ov.CompiledModel) -> list:
    """The Result ops of the compiled (runtime) graph, in the compiled model's output order."""
    return list(compiled.get_runtime_model().get_results())


def _numpy_type(element: ov.Type) -> np.dtype | None:
    try:
        return np.dtype(element.to_dtype())
    except (RuntimeError, TypeError, AttributeError):
        return None


@dataclass
class Bound:
    """One run's request with its host memory bound: outputs preallocated (fresh arrays, zero-copy) where
    the shape is known before the run, else read back after it."""

    request: ov.InferRequest
    outputs: dict[str, np.ndarray]        # name -> array OpenVINO writes into (zero-copy outputs)
    shared_in: int = 0                    # bytes read in place
    copied_in: int = 0                    # bytes copied to match OpenVINO's element type / layout


def bind(compiled: Compiled, values: dict[str, np.ndarray], shapes: dict[str, tuple | None]) -> Bound:
    """Take a request and bind the run's inputs (shared where dtype and layout allow) and fresh outputs."""
    request = compiled.take()
    bound = Bound(request, {})
    for i, name in enumerate(compiled.inputs):
        value = values[name]
        want = _numpy_type(compiled.model.inputs[i].get_element_type())
        if isinstance(value, np.ndarray) and value.flags.c_contiguous and (want is None or value.dtype == want) \
                and value.flags.aligned:
            bound.shared_in += value.nbytes
        else:
            value = np.ascontiguousarray(value, dtype=want)
            bound.copied_in += value.nbytes
        request.set_input_tensor(i, ov.Tensor(value, shared_memory=True))
    for i, name in enumerate(compiled.outputs):
        shape, dtype = shapes.get(name), compiled.output_types[i]
        if shape is not None and dtype is not None and name not in compiled.unbound and \
                all(isinstance(d, int) for d in shape):
            out = np.empty(shape, dtype)
            request.set_output_tensor(i, ov.Tensor(out, shared_memory=True))
            bound.outputs[name] = out
    return bound


def collect(compiled: Compiled, bound: Bound) -> tuple[dict[str, np.ndarray], int]:
    """The run's outputs (the bound arrays, or copies of what OpenVINO allocated) and the bytes copied."""
    results, copied = {}, 0
    for i, name in enumerate(compiled.outputs):
        if name in bound.outputs:
            results[name] = bound.outputs[name]
        else:
            results[name] = np.array(bound.request.get_output_tensor(i).data, copy=True)
            copied += results[name].nbytes
    return results, copied


def layer_times(requests: list[ov.InferRequest]) -> dict[str, tuple[str, str, float]]:
    """OpenVINO's per-layer counters of ``requests`` summed: layer -> (layer type, kernel, seconds)."""
    times: dict[str, tuple[str, str, float]] = {}
    for request in requests:
        for info in request.profiling_info:
            if info.status != info.Status.EXECUTED:
                continue
            kind, kernel, seconds = times.get(info.node_name, (info.node_type, info.exec_type, 0.0))
            times[info.node_name] = (kind, kernel, seconds + info.real_time.total_seconds())
    return times


def node_for_layer(layer: str, nodes: list[Node]) -> Node | None:
    """The nnhal node an OpenVINO layer comes from: OpenVINO names a converted node after the node or after
    its output tensor, and what it derives or fuses after those with a suffix ("name/...", "name_...")."""
    by_name = {n.name: n for n in nodes}
    by_output = {o: n for n in nodes for o in n.outputs if o}
    candidates = [layer, layer.split("/")[0], layer.rsplit("_", 1)[0]]
    for c in candidates:
        if c in by_name:
            return by_name[c]
        if c in by_output:
            return by_output[c]
    return None
