"""The default split: maximal same-device groups that keep the subgraph graph acyclic.

Nodes are visited in topological order. A node joins an existing group of its
device when no other group it depends on depends (transitively) on that group;
otherwise it opens a new group. This merges independent branches on the same
device and never lets a subgraph wait on itself through another device.
"""
from __future__ import annotations

from typing import Any

from nnhal.device.manager import FALLBACK_DEVICE
from nnhal.errors import DeviceError, wrapped
from nnhal.graph.graph import Graph
from nnhal.graph.subgraph import Subgraph


def group_nodes(graph: Graph, placement: dict[str, str]) -> list[tuple[str, list]]:
    """Partition nodes into (device, nodes) groups forming an acyclic graph, in a valid run order."""
    producer_group: dict[str, int] = {}
    groups: list[tuple[str, list]] = []
    deps: list[set[int]] = []          # transitive dependencies of each group
    for node in graph.nodes:
        device = placement[node.name]
        parents = {producer_group[n] for n in node.all_inputs if n in producer_group}
        closure = set(parents)
        for p in parents:
            closure |= deps[p]
        target = None
        for g in range(len(groups) - 1, -1, -1):
            if groups[g][0] != device:
                continue
            # joining g is safe if no other parent group depends on g
            if all(g not in deps[p] for p in parents if p != g):
                target = g
                break
        if target is None:
            groups.append((device, []))
            deps.append(set())
            target = len(groups) - 1
        groups[target][1].append(node)
        new = closure - {target}
        if not new <= deps[target]:
            deps[target] |= new
            for k in range(len(groups)):
                if target in deps[k]:
                    deps[k] |= deps[target]
        for out in node.outputs:
            if out:
                producer_group[out] = target
    return [groups[i] for i in _topological(deps)]


def _topological(deps: list[set[int]]) -> list[int]:
    done: set[int] = set()
    order: list[int] = []
    remaining = list(range(len(deps)))
    while remaining:
        for i in remaining:
            if deps[i] <= done:
                order.append(i)
                done.add(i)
                remaining.remove(i)
                break
        else:
            raise RuntimeError("split produced a cycle")
    return order


def default_split(graph: Graph, placement: dict[str, str]) -> list[Subgraph]:
    """Subgraphs with their boundary tensors, in an order producers-first."""
    return subgraphs_of(graph, group_nodes(graph, placement))


def subgraphs_of(graph: Graph, groups: list[tuple[str, list]]) -> list[Subgraph]:
    """Subgraphs of (device, nodes) groups given in a valid run order, their boundary tensors declared:
    inputs read from outside the group (constants excepted), outputs read outside it or graph outputs."""
    produced_in: dict[str, int] = {}
    for i, (_, nodes) in enumerate(groups):
        for node in nodes:
            for out in node.outputs:
                if out:
                    produced_in[out] = i
    readers: dict[str, set[int]] = {}
    for i, (_, nodes) in enumerate(groups):
        for node in nodes:
            for name in node.all_inputs:
                if name:
                    readers.setdefault(name, set()).add(i)
    graph_outputs = set(graph.outputs)
    subgraphs = []
    for i, (device, nodes) in enumerate(groups):
        inputs: list[str] = []
        outputs: list[str] = []
        for node in nodes:
            for name in node.all_inputs:
                if name and produced_in.get(name, -1) != i and not graph.tensors[name].is_constant \
                        and name not in inputs:
                    inputs.append(name)
            for name in node.outputs:
                if name and (name in graph_outputs or readers.get(name, set()) - {i}) and name not in outputs:
                    outputs.append(name)
        subgraphs.append(Subgraph(i, graph, nodes, inputs, outputs, device))
    return subgraphs


def enforce_min_group_size(graph: Graph, decisions: dict, min_size: int, fallback: str = FALLBACK_DEVICE) -> list[str]:
    """Re-place nodes of non-fallback groups smaller than ``min_size`` on the fallback device.

    A policy, not a constant: tiny groups cost two boundary crossings for
    little work. Returns the names of the nodes moved; their decisions say why.
    """
    from dataclasses import replace

    moved: list[str] = []
    if min_size <= 1:
        return moved
    while True:
        assignment = {name: d.device for name, d in decisions.items()}
        small = [(device, nodes) for device, nodes in group_nodes(graph, assignment)
                 if device != fallback and len(nodes) < min_size]
        if not small:
            return moved
        for device, nodes in small:
            for node in nodes:
                old = decisions[node.name]
                decisions[node.name] = replace(
                    old, device=fallback,
                    reason=f"its group on '{device}' has {len(nodes)} node(s), below min_group_size={min_size}",
                    declined={**old.declined, device: f"group of {len(nodes)} < min_group_size {min_size}"})
                moved.append(node.name)


def device_split(device: Any, graph: Graph, placement: dict[str, str]) -> list[Subgraph]:
    """Call a device's own ``split_graph`` and check its result (see :func:`check_split`)."""
    with wrapped(lambda exc: DeviceError(f"device '{device.name}': split_graph failed: {type(exc).__name__}: {exc}")):
        subgraphs = device.optimizer.split_graph(graph, dict(placement))
    check_split(device.name, graph, placement, subgraphs)
    return subgraphs


def split_per_device(graph: Graph, placement: dict[str, str], devices: list[Any]) -> list[Subgraph]:
    """The split of a context: each device with its own ``split_graph`` groups its own nodes, every other node
    gets the default split (maximal acyclic same-device groups around them).

    Each ``split_graph`` sees the whole graph and placement and its result is checked as a whole
    (:func:`check_split`: a DeviceError names the device); only its subgraphs on its own device are kept, as
    groups the default split then works around. The combined result is checked again."""
    labels: dict[str, Any] = dict(placement)
    splitters = [d for d in devices if d.optimizer is not None and d.optimizer.split_graph is not None]
    if not splitters:
        return default_split(graph, placement)
    for device in splitters:
        for sg in device_split(device, graph, placement):
            if sg.device == device.name:
                for node in sg.nodes:
                    labels[node.name] = (device.name, sg.index)
    # NOTE: a kept subgraph is convex (check_split refused a cycle), so the grouping never splits it
    subgraphs = subgraphs_of(graph, [(label[0] if isinstance(label, tuple) else label, nodes)
                                     for label, nodes in group_nodes(graph, labels)])
    check_split(", ".join(d.name for d in splitters), graph, placement, subgraphs)
    return subgraphs


def check_split(device: str, graph: Graph, placement: dict[str, str], subgraphs: Any) -> None:
    """A split is valid when every node appears in exactly one subgraph, each subgraph holds nodes of
    one device (the placement's), indices are unique, every tensor crossing a subgraph boundary is
    declared on both sides, and the subgraphs depend on each other without a cycle. DeviceError names
    the device whose ``split_graph`` broke the rule."""
    def bad(rule: str) -> DeviceError:
        return DeviceError(f"device '{device}': split_graph returned an invalid split: {rule}")

    if not isinstance(subgraphs, list) or not all(isinstance(sg, Subgraph) for sg in subgraphs):
        raise bad(f"expected a list of Subgraph, got {type(subgraphs).__name__}")
    indices = [sg.index for sg in subgraphs]
    if len(set(indices)) != len(indices):
        raise bad(f"subgraph indices {indices} are not unique")
    owner: dict[str, int] = {}
    for sg in subgraphs:
        for node in sg.nodes:
            if node.name in owner:
                raise bad(f"node '{node.name}' ({node.op_type}) is in subgraphs #{owner[node.name]} and #{sg.index}")
            owner[node.name] = sg.index
            if placement.get(node.name) != sg.device:
                raise bad(f"node '{node.name}' ({node.op_type}) is placed on '{placement.get(node.name)}' but "
                          f"sits in subgraph #{sg.index} on '{sg.device}'")
    missing = [n.name for n in graph.nodes if n.name not in owner]
    if missing:
        raise bad(f"node(s) {missing[:5]} are in no subgraph")
    extra = set(owner) - {n.name for n in graph.nodes}
    if extra:
        raise bad(f"node(s) {sorted(extra)[:5]} are not nodes of the graph")
    produced = {out: sg.index for sg in subgraphs for node in sg.nodes for out in node.outputs if out}
    by_index = {sg.index: sg for sg in subgraphs}
    deps: dict[int, set[int]] = {sg.index: set() for sg in subgraphs}
    for sg in subgraphs:
        for node in sg.nodes:
            for name in node.all_inputs:
                src = produced.get(name)
                if src is None or src == sg.index:
                    continue
                if name not in sg.inputs or name not in by_index[src].outputs:
                    raise bad(f"tensor '{name}' flows from subgraph #{src} to #{sg.index} but is not in the "
                              "outputs of the one and the inputs of the other")
                deps[sg.index].add(src)
        for name in graph.outputs:
            if produced.get(name) == sg.index and name not in sg.outputs:
                raise bad(f"graph output '{name}' is produced in subgraph #{sg.index} but not among its outputs")
    try:
        _topological(_relabel(deps))
    except RuntimeError:
        raise bad("the subgraphs depend on each other in a cycle") from None


def _relabel(deps: dict[int, set[int]]) -> list[set[int]]:
    """Dependencies keyed by arbitrary indices as a list keyed 0..n-1."""
    pos = {index: i for i, index in enumerate(sorted(deps))}
    return [{pos[d] for d in deps[index]} for index in sorted(deps)]
