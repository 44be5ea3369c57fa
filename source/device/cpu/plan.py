"""The compiled execution plan of a CPU subgraph.

At pre_run every node gets its kernel (chosen by score) and its prepared run
function; buffers come from the memory planner. A run is then a flat loop
over bound steps: gather input slots, call, store output slots.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from nnhal.device.cpu import parallel
from nnhal.device.cpu.attention_fuse import fuse_attention
from nnhal.device.cpu.castfuse import fuse_half_round_trips, fuse_relayout_casts, fuse_rounded_concats
from nnhal.device.cpu.channel_gather import fuse_channel_selections
from nnhal.device.cpu.commute import hoist_activations
from nnhal.device.cpu.fusions import (
    Chosen,
    fuse_activations,
    fuse_channel_shuffle,
    fuse_conv1d_transposes,
    fuse_gelu,
    fuse_matmul,
)
from nnhal.device.cpu.gelu_tanh import fuse_gelu_tanh
from nnhal.device.cpu.groupnorm import fuse_group_norm
from nnhal.device.cpu.integer import (
    choose_winograd,
    fold_smooth_scales,
    fuse_code_clamps,
    fuse_code_tables,
    fuse_dynamic_gelu,
    fuse_table_tails,
    use_integer_kernels,
)
from nnhal.device.cpu.kernels import control, select
from nnhal.device.cpu.layout import Layouts, assign_layouts
from nnhal.device.cpu.matmul_views import fold_transposes
from nnhal.device.cpu.planner import MemoryPlan, arena_views, plan_memory
from nnhal.device.cpu.rmsnorm_fuse import fuse_rms_norms
from nnhal.device.cpu.rotary_fuse import fuse_rotary
from nnhal.device.cpu.scale_fold import fold_operand_scales
from nnhal.device.cpu.spatial_mean import fuse_spatial_means
from nnhal.device.cpu.split_concat import merge_split_parts
from nnhal.device.cpu.straight import Chunk, bind, binds_input, failing_step, generate
from nnhal.errors import DeviceError, NnhalError, where, wrapped
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import TensorKind
from nnhal.hostkernels.base import checking
from nnhal.hostkernels.graphrun import tensor_info
from nnhal.hostkernels.select import reference_forced
from nnhal.operator.base import Info
from nnhal.operator.schema import check_input_types
from nnhal.operator.table import get_prototype


class NestedTiming:
    """Step timing of the plans a profiled plan runs inside its steps (If branches, Loop and Scan bodies).

    While ``active`` (the cpu device's profile hook switches it on with the subgraph's own timing), every
    plan that runs times its steps into ``plans``; each step's time is *exclusive*: what its nested plans'
    steps took is subtracted, so a control-flow node keeps only its own bookkeeping and every body step is
    a row of its own. ``inner`` carries, up the nesting, the seconds the steps of the innermost running
    plan took. Nested plans are kept per profiled plan (``owner``: the one whose steps are running), so
    several profiled subgraphs each get their own bodies. One profiled run at a time (profiling is a
    diagnostic, not a concurrent path)."""

    def __init__(self) -> None:
        self.active = 0                   # profiled plans switched on
        self.inner = 0.0
        self.owner: Plan | None = None
        self.plans: dict[int, dict[int, tuple[Plan, list[float]]]] = {}

    def start(self) -> None:
        self.active += 1

    def stop(self, owner: Plan) -> list[tuple[Plan, list[float]]]:
        """The nested plans that ran inside ``owner``'s steps, with their step timings; ``owner`` is off."""
        self.active = max(0, self.active - 1)
        return list(self.plans.pop(id(owner), {}).values())

    def timings_of(self, plan: Plan) -> list[float]:
        found = self.plans.setdefault(id(self.owner), {})
        entry = found.get(id(plan))
        if entry is None:
            entry = found[id(plan)] = (plan, [0.0] * len(plan.steps))
        return entry[1]


NESTED = NestedTiming()


@dataclass
class Step:
    node: Node
    kernel_name: str
    run: object
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    buffers: list                     # preallocated outputs (None = kernel allocates)
    fresh: tuple[tuple[int, tuple, np.dtype], ...] = ()  # (position, shape, dtype) allocated per run
    expect: tuple[Info | None, ...] = ()
    logical: bool = True              # every input is in the ONNX layout (no channels-last region)
    inputs: tuple[Info | None, ...] = ()  # what inference knows of each input (the native step program reads it)
    kernel: object = None             # the kernel object that prepared ``run``


def _explain(node: Node, inputs: list, failure: Exception) -> None:
    """Raise the prototype's own typed error when a kernel failed on operands that inference could not
    see before the run (shapes or values known only now); return when inference accepts them."""
    infos = [None if a is None else Info.of(a) for a in inputs]
    try:
        check_input_types(node, infos)
        get_prototype(node.domain, node.op_type).infer(node, infos)
    except NnhalError as reason:
        raise reason from failure
    except Exception:  # inference has no better word for it than the kernel's own error
        return


@dataclass
class Buffers:
    """One arena and every step's output buffers in it: what a run writes. A plan keeps a pool of them,
    one per run in flight, so concurrent runs of one plan never share an intermediate tensor."""

    arena: np.ndarray
    per_step: list[list]
    # the bound calls of the plan's bound steps on this set (straight.bind), per thread split (bound_key): the
    # views and splits a kernel bound belong to this set, never to the plan, so two sets share none
    bound: dict = field(default_factory=dict)

    @staticmethod
    def lay_out(memory: MemoryPlan, layout: tuple) -> "Buffers":
        """A fresh arena and, per step, its outputs' views in it (None: the kernel allocates or views)."""
        shapes, dtypes, names = layout
        arena = np.empty(max(memory.arena_bytes, 1), dtype=np.uint8)
        views = arena_views(memory, arena, shapes, dtypes)
        return Buffers(arena, [[views.get(n) for n in outs] for outs in names])


@dataclass
class Plan:
    """A compiled subgraph: run(values) reads inputs from and writes outputs to ``values``.

    Re-entrant: a run takes a free set of buffers from the pool (or lays out a new arena when every set
    is in use by another thread's run) and gives it back at the end; everything else is read-only."""

    steps: list[Step]
    slots: list                                   # template: constants filled, rest None
    inputs: list[tuple[str, int]]
    outputs: list[tuple[str, int]]
    memory: MemoryPlan
    kernels: dict[str, str] = field(default_factory=dict)
    # seconds per step, summed over runs, while profiling (nnhal.profile); None = not timed
    timings: list[float] | None = None
    layout: tuple = ()                            # (shapes, dtypes, per-step output names) to lay out an arena
    pool: list[Buffers] = field(default_factory=list)
    # the steps as generated straight-line functions (straight.py); empty = interpret them
    chunks: list[Chunk] = field(default_factory=list)
    in_slots: tuple[int, ...] = field(init=False)
    out_slots: tuple[int, ...] = field(init=False)
    binds: bool = field(init=False)              # some step is bound (straight.bind)

    def __post_init__(self) -> None:
        self.in_slots = tuple(idx for _, idx in self.inputs)
        self.out_slots = tuple(idx for _, idx in self.outputs)
        self.binds = any(chunk.binds for chunk in self.chunks)

    def call(self, arrays: Sequence[np.ndarray], check: bool = False) -> list[np.ndarray]:
        """Positional run (a control-flow body): ``arrays`` in the order of ``inputs``, the outputs returned in
        the order of ``outputs``."""
        buffers = self.take()
        try:
            return self.call_on(arrays, check, buffers)
        finally:
            self.pool.append(buffers)

    def call_on(self, arrays: Sequence[np.ndarray], check: bool, buffers: Buffers) -> list[np.ndarray]:
        """:meth:`call` on ``buffers``. The straight-line path builds no dict and reads no environment;
        profiling and checking runs go through :meth:`execute`."""
        if self.chunks and not check and self.timings is None and not NESTED.active:
            call = self.chunks[0].call
            if call is not None:            # one chunk: its positional function
                try:
                    return call(arrays, buffers.per_step, buffers.arena, self.bound(buffers))
                except (NnhalError, MemoryError):
                    raise
                except Exception as exc:
                    self._explain_failure(exc, self._filled(zip(self.in_slots, arrays)), buffers)
        # NOTE: the interpreting, checked and profiled runs fill the slot list as the straight-line one does: no
        # dict of names per iteration (what a profile counts as its control-flow node's own time)
        slots = self._filled(zip(self.in_slots, arrays))
        self._on_slots(slots, check, buffers)
        return [slots[i] for i in self.out_slots]

    def _filled(self, inputs) -> list:
        """A run's slot list: the template (constants filled) with ``inputs`` ((slot, array) pairs) set."""
        slots = list(self.slots)
        for idx, a in inputs:
            slots[idx] = a
        return slots

    def run(self, values: dict[str, np.ndarray], check: bool | None = None) -> None:
        """Run with ``values`` (inputs in, outputs out); ``check``: verify outputs against inference
        (None: as NNHAL_CHECK says now; the cpu device passes its reading at prepare, cpu_pre_run, and nested
        bodies their node's, read when it was prepared)."""
        if check is None:
            check = checking()
        buffers = self.take()
        try:
            if self.chunks and not check and self.timings is None and not NESTED.active:
                # NOTE: the run path of every Session.run: the chunks straight over the slot list, without the
                # frames of execute, _filled and _on_slots (what they add there is for checked and timed runs)
                slots = list(self.slots)
                for name, idx in self.inputs:
                    slots[idx] = values[name]
                self._straight(slots, buffers)
                for name, idx in self.outputs:
                    values[name] = slots[idx]
            else:
                self.execute(values, check, buffers)
        finally:
            self.pool.append(buffers)

    def bound(self, buffers: Buffers) -> list:
        """The bound calls (straight.bind) of this plan's steps on ``buffers`` under the thread split in force now,
        bound on first use; an empty tuple when no step is bound."""
        if not self.binds:
            return ()
        key = bound_key()
        calls = buffers.bound.get(key)
        if calls is None:
            calls = buffers.bound[key] = bind(self.steps, self.chunks, buffers.per_step)
        return calls

    def take(self) -> Buffers:
        """A free set of buffers from the pool, or a new one (give it back with ``pool.append``)."""
        try:
            return self.pool.pop()            # NOTE: pop/append are atomic: no lock on the run path
        except IndexError:
            return Buffers.lay_out(self.memory, self.layout)

    def iterate(self, turns: int = 2) -> Iteration:
        """Buffer sets held for the iterations of one Loop or Scan run, two taken in turn (see Iteration); one for
        an If's branch, run once, whose outputs its node copies before ``close``."""
        return Iteration(self, tuple(self.take() for _ in range(turns)))

    def execute(self, values: dict[str, np.ndarray], check: bool, buffers: Buffers) -> None:
        """One run on ``buffers``: straight-line, or step by step when checking or timed (profiling)."""
        slots = self._filled((idx, values[name]) for name, idx in self.inputs)
        self._on_slots(slots, check, buffers)
        for name, idx in self.outputs:
            values[name] = slots[idx]

    def _on_slots(self, slots: list, check: bool, buffers: Buffers) -> None:
        """:meth:`execute` over a filled slot list (outputs read from it after)."""
        timings, owner = self.timings, NESTED.owner
        if timings is not None:
            NESTED.owner = self
        elif NESTED.active:
            timings = NESTED.timings_of(self)
        try:
            if self.chunks and timings is None and not check:
                self._straight(slots, buffers)
            else:
                self._run(slots, buffers.per_step, check, timings)
        finally:
            NESTED.owner = owner

    def _straight(self, slots: list, buffers: Buffers) -> None:
        """Every chunk over ``slots`` (inputs filled; outputs read from it after)."""
        per_step, arena = buffers.per_step, buffers.arena
        try:
            bound = self.bound(buffers)
            for chunk in self.chunks:
                chunk.run(slots, per_step, arena, bound)
        except (NnhalError, MemoryError):   # out of memory: the caller turns it into a LimitError
            raise
        except Exception as exc:
            self._explain_failure(exc, self._filled((idx, slots[idx]) for idx in self.in_slots), buffers)

    def _explain_failure(self, exc: Exception, slots: list, buffers: Buffers) -> None:
        """Raise the typed error of a straight-line run that failed with ``exc`` on the inputs filled in ``slots``
        (a fresh slot list)."""
        # NOTE: the straight-line code keeps tensors in locals: run the plan again step by step, where
        # the failing step's operands are at hand for the prototype to explain (kernels are pure)
        self._run(slots, buffers.per_step, False, None)
        k = failing_step(exc, self.chunks)
        if k is None:
            raise DeviceError(f"cpu: a plan's run failed: {type(exc).__name__}: {exc}") from exc
        step = self.steps[k]
        raise DeviceError(f"{where(step.node, 'cpu')}: kernel '{step.kernel_name}' failed: "
                          f"{type(exc).__name__}: {exc}") from exc

    def _run(self, slots: list, per_step: list[list], check: bool, timings: list[float] | None) -> None:
        """The interpreting loop over a filled slot list: step by step, ``check``: each output verified, ``timings``:
        each step's exclusive seconds added."""
        for k, step in enumerate(self.steps):
            if timings is not None:
                inner = NESTED.inner
                t0 = time.perf_counter()
            bufs = per_step[k]
            if step.fresh:
                bufs = list(bufs)
                for pos, shape, dtype in step.fresh:
                    bufs[pos] = np.empty(shape, dtype)
            try:
                result = step.run([slots[i] for i in step.ins], bufs)
            except (NnhalError, MemoryError):   # out of memory: the caller turns it into a LimitError
                raise
            except Exception as exc:
                if step.logical:
                    _explain(step.node, [slots[i] for i in step.ins], exc)
                raise DeviceError(f"{where(step.node, 'cpu')}: kernel '{step.kernel_name}' failed: "
                                  f"{type(exc).__name__}: {exc}") from exc
            for pos, (idx, r) in enumerate(zip(step.outs, result)):
                buf = bufs[pos]
                # NOTE: a view bound to its input (straight.py binds_input) leaves a planned buffer unwritten on
                # this path too (the planner gives views none; a kernel's may): the profile times what a run does
                if buf is not None and r is not buf and (step.fresh or not binds_input(step)):
                    np.copyto(buf, r, casting="unsafe")
                    r = buf
                slots[idx] = r
            if check:
                _verify(step, result)
            if timings is not None:
                took = time.perf_counter() - t0
                timings[k] += took - (NESTED.inner - inner)   # exclusive of nested plans' steps
                NESTED.inner = inner + took


class Iteration:
    """The iterations of one Loop or Scan run of a body plan compiled ``borrowed`` (control.plan_iteration_body).

    Two buffer sets are held for the whole run and taken in turn, so a body output stays where its step wrote
    it (an Identity of a step's output is that output, not a per-iteration copy): the next iteration writes the
    other set while it reads this one's outputs as its inputs. An output found in the other set's arena is an
    input passed through from the iteration before, which the next iteration would overwrite: it alone is
    copied. The driver copies what it keeps after the last iteration (final states, scan rows) before
    ``close`` gives the sets back to the plan's pool. An If holds one set for its one run of a branch, and
    stores or copies the branch's outputs before ``close``."""

    def __init__(self, plan: Plan, sets: tuple[Buffers, ...]):
        self.plan, self.sets, self.turn = plan, sets, 0
        # NOTE: what Plan.call_on decides per call, decided once per Loop or Scan run (a run is profiled or not as
        # a whole): the plan's one positional chunk, with each turn's (per_step, arena, the other set's arena)
        chunk = plan.chunks[0] if len(plan.chunks) == 1 else None
        self.direct = chunk.call if chunk is not None and plan.timings is None and not NESTED.active else None
        self.turns = tuple((sets[t].per_step, sets[t].arena, sets[1 - t].arena, plan.bound(sets[t]))
                           for t in range(len(sets))) if len(sets) == 2 and self.direct is not None else ()

    def call(self, arrays: Sequence[np.ndarray], check: bool = False) -> list[np.ndarray]:
        """One iteration (:meth:`Plan.call` on this turn's buffer set)."""
        if len(self.sets) == 1:
            return self.plan.call_on(arrays, check, self.sets[0])
        turn = self.turn
        self.turn = 1 - turn
        direct = self.direct
        if direct is None or check:
            results = self.plan.call_on(arrays, check, self.sets[turn])
            other = self.sets[1 - turn].arena
        else:
            per_step, arena, other, bound = self.turns[turn]
            try:
                results = direct(arrays, per_step, arena, bound)
            except (NnhalError, MemoryError):
                raise
            except Exception as exc:
                plan = self.plan
                plan._explain_failure(exc, plan._filled(zip(plan.in_slots, arrays)), self.sets[turn])
        return [np.array(r) if getattr(r, "base", None) is other else r for r in results]

    def close(self) -> None:
        """Give the buffer sets back to the plan's pool."""
        self.plan.pool.extend(self.sets)


def bound_key() -> tuple[bool, int]:
    """What a bound step's calls depend on beyond its buffer set: whether this thread's run splits over the pools
    and over how many threads (Options.num_thread may change between runs): the key of Buffers.bound."""
    return parallel.enabled(), parallel.threads()


def compile_nodes(graph: Graph, nodes: list[Node], inputs: list[str], outputs: list[str], body: bool = False,
                  borrowed: bool = False) -> Plan:
    """Build the plan for ``nodes`` of ``graph`` reading ``inputs`` and producing ``outputs`` (``body``: a
    control-flow body's, which may choose the kernels of one step's small products, kernels/step_gemm.py;
    ``borrowed``: a Loop or Scan body's or an If branch's, run through :class:`Iteration`, whose outputs may be its
    inputs or its steps' outputs as they are, see control.plan_iteration_body)."""
    index: dict[str, int] = {"": 0}
    slots: list = [None, None]  # 0: absent input (None); 1: sink for absent outputs

    layouts = Layouts({}, {})
    constants: dict[str, np.ndarray] = {}     # made by the fusions and the layout pass

    def slot(name: str) -> int:
        if name not in index:
            index[name] = len(slots)
            t = graph.tensors.get(name)
            if name in constants:
                slots.append(constants[name])
            else:
                slots.append(t.value if t is not None and t.kind is TensorKind.CONSTANT else None)
        return index[name]

    external = set(inputs) | set(outputs)
    chosen = []
    for node in nodes:
        ins = [tensor_info(graph, n) for n in node.inputs]
        outs = [tensor_info(graph, n) or Info(None, None) for n in node.outputs]
        kernel = select(node, ins, outs, body=body)
        chosen.append(Chosen(node, kernel, ins, outs))
    if not reference_forced():
        chosen = use_integer_kernels(chosen)
        chosen = fold_smooth_scales(chosen, external)
        chosen = fuse_code_clamps(chosen, external)
        chosen = fuse_code_tables(chosen, external)
        chosen = fuse_half_round_trips(chosen, external)
        chosen = fuse_gelu(chosen, external)
        chosen = fuse_gelu_tanh(chosen, external)
        chosen = fuse_dynamic_gelu(chosen, external)
        chosen = fuse_rms_norms(chosen, external, constants)
        chosen = fuse_rotary(chosen, external)
        chosen = fuse_attention(chosen, external, constants)
        chosen = fold_operand_scales(chosen, external, constants)
        chosen = fuse_matmul(chosen, external)
        chosen = fuse_group_norm(chosen, external, constants)
        chosen = hoist_activations(chosen, external)
        chosen = fuse_activations(chosen, external)
        chosen = fuse_conv1d_transposes(chosen, external)
        chosen = fuse_channel_shuffle(chosen, external, constants)
        chosen = fuse_channel_selections(chosen, external, constants)
        chosen = fuse_spatial_means(chosen, external)
        chosen = fold_transposes(chosen, external)
        chosen, layouts = assign_layouts(chosen, external)
        # after the layout pass, which chooses a Concat's kernel again for channels-last tensors
        chosen = fuse_rounded_concats(chosen, external, set(layouts.physical))
        chosen = fuse_table_tails(chosen, external)
        chosen = choose_winograd(chosen)
        chosen = fuse_relayout_casts(chosen, external)
        chosen = merge_split_parts(chosen, external)
        constants.update(layouts.constants)
    physical = layouts.physical
    sizes: dict[str, int] = {}
    shapes: dict[str, tuple] = {}
    dtypes: dict[str, np.dtype] = {}
    for node, kernel, _, _ in chosen:
        for name in node.outputs:
            t = graph.tensors.get(name)
            if name in physical:
                p = physical[name]
                sizes[name] = int(np.prod(p.shape, dtype=np.int64)) * p.dtype.itemsize
                shapes[name], dtypes[name] = tuple(p.shape), p.dtype
            elif name and name not in external and t is not None and t.static and not t.is_constant \
                    and not t.dtype.hasobject:
                sizes[name] = t.nbytes
                shapes[name], dtypes[name] = t.shape, t.dtype
    slices, strided = ({}, {}) if reference_forced() else concat_slices(graph, chosen, sizes, physical)
    # NOTE: the outputs are read after the last step: an output that is a view of a planned tensor (a borrowed
    # body's Identity, a view kernel's result) keeps that tensor's buffer to the end of the run
    memory = plan_memory([(n.all_inputs, n.outputs, k.inplace, k.view) for n, k, _, _ in chosen]
                         + [(list(outputs), [], {}, {})], sizes, external, slices, strided)
    layout = (shapes, dtypes, [tuple(node.outputs) for node, _, _, _ in chosen])
    first = Buffers.lay_out(memory, layout)       # the pool's first set; more are laid out while runs overlap
    steps: list[Step] = []
    kernels: dict[str, str] = {}
    for node, kernel, ins, outs in chosen:
        # out of memory passes: the caller turns it into a LimitError
        with wrapped(lambda exc: DeviceError(f"{where(node, 'cpu')}: preparing kernel '{kernel.name}' failed: {exc}"),
                     passthrough=(MemoryError,)):
            run = kernel.prepare(node, ins, outs)
        buffers, fresh = first.per_step[len(steps)], []
        passes = borrowed and control.binds_output(node, kernel, run)
        for pos, name in enumerate(node.outputs):
            t = graph.tensors.get(name) if name else None
            if name in external and t is not None and t.static and not passes:
                fresh.append((pos, t.shape, t.dtype))
        expect = tuple(physical.get(name, o) if name else o for name, o in zip(node.outputs, outs))
        steps.append(Step(node, kernel.name, run, tuple(slot(n) if n else 0 for n in node.all_inputs),
                          tuple(slot(n) if n else 1 for n in node.outputs), buffers, tuple(fresh), expect,
                          not any(n in physical for n in node.all_inputs), tuple(ins), kernel))
        kernels[node.name] = kernel.name
    in_slots = [(n, slot(n)) for n in inputs]
    out_slots = [(n, slot(n)) for n in outputs]
    return Plan(steps, slots, in_slots, out_slots, memory, kernels, layout=layout, pool=[first],
                chunks=generate(steps, slots, out_slots, first.arena, in_slots if body else None))


def concat_slices(graph: Graph, chosen: list, sizes: dict[str, int], physical: dict[str, Info] | None = None) \
        -> tuple[dict[str, tuple[str, int]], dict[str, tuple[int, ...]]]:
    """Concat inputs the planner can place inside the Concat output's buffer, as name -> (output, byte offset),
    and the byte strides of those that are not one contiguous block: their producers then write straight
    into the output and the Concat copies nothing.

    A slice is a contiguous block where all dims before the axis are 1 (as at batch 1, NCHW); otherwise only
    a slice of the last axis (channels of a channels-last output, ``physical`` gives the NHWC shapes), whose
    view has the output's strides: there the producer's kernel must write such a view (strided_writer) and
    the Concat must be the tensor's only reader but for steps whose kernel reads such a view (strided_reader:
    the Split a C2f Concat reads around, split_concat.py). Inputs must be planned, read once by that Concat, produced
    here, not a view of another tensor and not already placed in another Concat. Concats are taken last
    first so nested ones (DenseNet) chain; a strided slice neither holds nor sits in another Concat."""
    physical = physical or {}
    produced: dict[str, tuple[Node, int, object, list, list]] = {}
    reads: Counter = Counter()
    readers: dict[str, list] = {}
    for node, kernel, ins, outs in chosen:
        reads.update(n for n in node.all_inputs if n)
        for k, name in enumerate(node.all_inputs):
            if name:
                readers.setdefault(name, []).append((node, kernel, k))
        for k, name in enumerate(node.outputs):
            if name:
                produced[name] = (node, k, kernel, ins, outs)

    def shape_of(name: str) -> tuple[tuple | None, np.dtype | None]:
        if name in physical:
            return tuple(physical[name].shape), physical[name].dtype
        t = graph.tensors.get(name) if name else None
        return (None, None) if t is None or t.shape is None else (tuple(t.shape), t.dtype)

    slices: dict[str, tuple[str, int]] = {}
    strided: dict[str, tuple[int, ...]] = {}
    for node, kernel, _, _ in reversed(chosen):
        if node.op_type != "Concat" or node.domain or not getattr(kernel, "writes_in_place", False):
            continue
        out = node.outputs[0]
        shape, dtype = shape_of(out)
        if out not in sizes or shape is None or out in strided:
            continue
        rank = len(shape)
        axis = node.attrs["axis"] % rank
        block = all(d == 1 for d in shape[:axis])
        if not block and (axis != rank - 1 or out in slices):
            continue
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64)) * dtype.itemsize
        steps = tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) * dtype.itemsize for k in range(rank))
        counts = Counter(node.inputs)
        off = 0
        for name in node.inputs:
            ishape, idtype = shape_of(name)
            if ishape is None or len(ishape) != rank:
                break
            size = int(ishape[axis]) * inner
            prod = produced.get(name)
            fits = name in sizes and counts[name] == 1 and name not in slices and prod is not None \
                and prod[1] not in prod[2].view and idtype == dtype
            if fits and block and sizes[name] == size:
                slices[name] = (out, off)
            elif fits and not block and prod[1] == 0 and ishape[:axis] == shape[:axis] \
                    and all(r is node or strided_reader(kr, r, k) for r, kr, k in readers[name]) \
                    and strided_writer(prod[2], prod[0], prod[3], prod[4]):
                slices[name] = (out, off)
                strided[name] = steps
            off += size
    return slices, strided


def strided_writer(kernel, node: Node, ins: list, outs: list) -> bool:
    """Whether ``kernel`` writes output 0 of ``node`` into a channel slice of a wider channels-last tensor:
    its ``strided_output_for(node, ins, outs)`` when it has one (the path it takes depends on the node, as
    the NHWC convolutions' do), else its ``strided_output``."""
    hook = getattr(kernel, "strided_output_for", None)
    return bool(hook(node, ins, outs)) if hook is not None else bool(getattr(kernel, "strided_output", False))


def strided_reader(kernel, node: Node, k: int) -> bool:
    """Whether ``kernel`` reads input ``k`` of ``node`` from a channel slice of a wider channels-last tensor (its
    pixels further apart than its channels) as fast as from a contiguous one: its ``strided_input`` names k."""
    return k in getattr(kernel, "strided_input", ())


def _verify(step: Step, result) -> None:
    for name, r, expect in zip(step.node.outputs, result, step.expect):
        if not name or expect is None:
            continue
        r = np.asarray(r)
        if expect.dtype is not None and r.dtype != expect.dtype:
            raise DeviceError(f"{where(step.node, 'cpu')}: output '{name}' has dtype {r.dtype}; inference said "
                              f"{expect.dtype}")
        if expect.shape is not None and (len(r.shape) != len(expect.shape) or any(
                e is not None and e != d for e, d in zip(expect.shape, r.shape))):
            raise DeviceError(f"{where(step.node, 'cpu')}: output '{name}' has shape {r.shape}; inference said "
                              f"{expect.shape}")


control.install_body_compiler(partial(compile_nodes, body=True))  # If/Loop/Scan bodies: planned like the main graph
