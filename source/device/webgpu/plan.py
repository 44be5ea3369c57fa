"""From a subgraph to steps and memory: aliases, fused groups, and GPU buffers planned by lifetime.

Runs at the allocator's ``allocate`` hook, before pre_run, and needs no GPU: it decides

* which names are aliases (Reshape & co.) of another tensor's buffer,
* the elementwise groups (a node joins the group of its elementwise readers when they are all in one
  group and have its shape),
* which groups become the epilogue of the Conv/MatMul/Gemm that feeds them,
* the step order, and for every tensor that lives on the device a buffer slot: boundary inputs,
  outputs and constants have their own; intermediates share slots whose previous tenant is dead
  (best fit by size).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnhal.device.webgpu.kernels._eltwise import externals
from nnhal.device.webgpu.kernels.table import ALIASES, EPILOGUE_PRODUCERS, EXPRS
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph


@dataclass
class Step:
    """One launch unit: a kernel node (with its fused epilogue group) or a standalone elementwise group."""

    node: Node | None
    group: list[Node] = field(default_factory=list)

    @property
    def nodes(self) -> list[Node]:
        return ([self.node] if self.node is not None else []) + self.group

    @property
    def label(self) -> str:
        return "+".join(n.op_type for n in self.nodes)


@dataclass
class Plan:
    steps: list[Step]
    root: dict[str, str]             # tensor name -> the name whose buffer holds it
    slot: dict[str, int]             # root name -> buffer slot
    slot_bytes: list[int]            # size of each slot
    kinds: dict[int, str]            # slot -> 'input' | 'output' | 'constant' | 'scratch'
    intermediate_bytes: int = 0      # what the scratch slots take
    unplanned_bytes: int = 0         # what they would take without reuse


def nbytes(sg: Subgraph, name: str) -> int:
    """Device bytes of a tensor: 4 per element (f32, i32; int64 and bool are held as i32), 2 for a float
    tensor of an fp16 subgraph, rounded up to whole words; WebGPU wants non-empty buffers."""
    t = sg.graph.tensors[name]
    count = int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1
    size = 2 * count if sg.precision == "fp16" and t.dtype == np.float32 else 4 * count
    return max(4 * ((size + 3) // 4), 4)


def _consumers(nodes: list[Node]) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for n in nodes:
        for name in dict.fromkeys(x for x in n.inputs if x):
            out.setdefault(name, []).append(n)
    return out


def _groups(sg: Subgraph, consumers: dict[str, list[Node]], max_buffers: int) -> dict[str, list[Node]]:
    """sink node name -> the elementwise nodes that fuse into it, in order."""
    outputs = set(sg.outputs)
    def shape(name: str) -> tuple:
        return tuple(sg.graph.tensors[name].shape)
    sink: dict[str, str] = {}
    for node in reversed(sg.nodes):
        if node.op_type not in EXPRS:
            continue
        out = node.outputs[0]
        users = consumers.get(out, [])
        # NOTE: a node joins when every reader is in one group (a DAG, e.g. x * (1 + erf(x / sqrt2))):
        # the group computes each value once per element
        targets = {sink.get(u.name) for u in users}
        if (out not in outputs and users and None not in targets and len(targets) == 1
                and all(shape(u.outputs[0]) == shape(out) for u in users)):
            sink[node.name] = targets.pop()
        else:
            sink[node.name] = node.name
    groups: dict[str, list[Node]] = {}
    for node in sg.nodes:
        if node.name in sink:
            groups.setdefault(sink[node.name], []).append(node)
    for key, members in list(groups.items()):
        # NOTE: a group reading more tensors than a shader may bind runs node by node
        if len(externals(members)) + 1 > max_buffers and len(members) > 1:
            del groups[key]
            for n in members:
                groups[n.name] = [n]
    return groups


def make_plan(sg: Subgraph, max_buffers: int = 32) -> Plan:
    tensors = sg.graph.tensors
    root: dict[str, str] = {}
    consumers = _consumers(sg.nodes)
    launched: set[str] = set()       # aliases with a further output someone reads (Dropout's mask)
    for node in sg.nodes:
        if node.op_type in ALIASES and any(o and (o in sg.outputs or o in consumers) for o in node.outputs[1:]):
            launched.add(node.name)
        if node.op_type in ALIASES:
            src = node.inputs[0]
            root[node.outputs[0]] = root.get(src, src)
    def resolve(name: str) -> str:
        return root.get(name, name)
    groups = _groups(sg, consumers, max_buffers)
    sink_of = {n.name: key for key, members in groups.items() for n in members}
    outputs = set(sg.outputs)
    epilogue_of: dict[str, str] = {}         # producer node name -> group key
    for node in sg.nodes:
        if node.op_type not in EPILOGUE_PRODUCERS:
            continue
        out = node.outputs[0]
        users = consumers.get(out, [])
        if out in outputs or len(users) != 1 or users[0].name not in sink_of:
            continue
        key = sink_of[users[0].name]
        members = groups[key]
        if key in epilogue_of.values() or tuple(tensors[members[-1].outputs[0]].shape) != tuple(tensors[out].shape):
            continue
        bindings = len([i for i in node.inputs if i]) + 1 + len([e for e in externals(members) if e != out])
        if bindings > max_buffers:
            continue        # the fused shader would bind more storage buffers than the adapter allows
        epilogue_of[node.name] = key
    fused_groups = {key: name for name, key in epilogue_of.items()}
    by_name = {n.name: n for n in sg.nodes}
    steps: list[Step] = []
    for node in sg.nodes:
        if (node.op_type in ALIASES and node.name not in launched) or node.name in epilogue_of:
            continue
        if node.name in sink_of:
            key = sink_of[node.name]
            if key != node.name:
                continue
            producer = fused_groups.get(key)
            steps.append(Step(by_name[producer] if producer else None, groups[key]))
            continue
        steps.append(Step(node))
    return _memory(sg, steps, root, resolve)


def _memory(sg: Subgraph, steps: list[Step], root: dict[str, str], resolve) -> Plan:
    tensors = sg.graph.tensors
    pinned = {resolve(n) for n in sg.outputs} | {resolve(n) for n in sg.inputs}
    reads: list[set[str]] = []
    writes: list[list[str]] = []
    for step in steps:
        made = {o for n in step.nodes for o in n.outputs if o}
        reads.append({resolve(i) for n in step.nodes for i in n.inputs if i and i not in made})
        last = step.nodes[-1]
        outs = [o for o in (step.nodes[0].outputs if step.node is not None and not step.group else last.outputs) if o]
        writes.append([resolve(o) for o in outs])
    last_use: dict[str, int] = {}
    for i, r in enumerate(reads):
        for name in r:
            last_use[name] = i
    slot: dict[str, int] = {}
    slot_bytes: list[int] = []
    kinds: dict[int, str] = {}

    def new_slot(name: str, kind: str) -> None:
        slot[name] = len(slot_bytes)
        kinds[len(slot_bytes)] = kind
        slot_bytes.append(nbytes(sg, name))

    for name in sg.inputs:
        if resolve(name) not in slot:
            new_slot(resolve(name), "input")
    for r in reads:
        for name in r:
            if name not in slot and tensors[name].is_constant:
                new_slot(name, "constant")
    free: list[int] = []
    unplanned = 0
    for i, w in enumerate(writes):
        for name in w:
            if name in slot:
                continue
            if name in pinned:
                new_slot(name, "output")
                continue
            need = nbytes(sg, name)
            unplanned += need
            fits = [s for s in free if slot_bytes[s] >= need]
            if fits:
                best = min(fits, key=lambda s: slot_bytes[s])
                free.remove(best)
                slot[name] = best
            elif free:
                # NOTE: grow the largest free slot rather than add one: fewer, larger buffers
                grow = max(free, key=lambda s: slot_bytes[s])
                free.remove(grow)
                slot_bytes[grow] = need
                slot[name] = grow
            else:
                new_slot(name, "scratch")
        dead = {name for name in reads[i] | set(w) if last_use.get(name, -1) <= i and name not in pinned
                and name in slot and kinds[slot[name]] == "scratch"}
        for name in dead:
            if slot[name] not in free:
                free.append(slot[name])
    scratch = sum(b for s, b in enumerate(slot_bytes) if kinds[s] == "scratch")
    return Plan(steps, root, slot, slot_bytes, kinds, scratch, unplanned)
