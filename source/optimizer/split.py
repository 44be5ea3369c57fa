"""The default split: maximal same-device groups that keep the subgraph graph acyclic.

Nodes are visited in topological order. A node joins an existing group of its
device when no other group it depends on depends (transitively) on that group;
otherwise it opens a new group. This merges independent branches on the same
device and never lets a subgraph wait on itself through another device.
"""
from __future__ import annotations

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
    groups = group_nodes(graph, placement)
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


def enforce_min_group_size(graph: Graph, decisions: dict, min_size: int, fallback: str = "cpu") -> list[str]:
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
