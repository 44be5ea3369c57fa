"""Placement: each node goes to the first device that describes its op and
precision and whose evaluation accepts it; the fallback device takes the rest.
With ``prefer="speed"`` or ``"power"`` it goes instead to the device, among
those that accept it, with the lowest ``Description.performance`` figure for
its precision (NNAPI's execution preference); ties keep the priority order.

User pins (node name or op type -> device) and denials (node name or op type
-> devices it must not use) win. Every decision carries its reasons.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nnhal.device.device import Candidate, Device
from nnhal.device.manager import FALLBACK_DEVICE
from nnhal.errors import UnsupportedOperatorError, where
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.optimizer.infer import info_of


@dataclass
class Decision:
    """Where one node goes and why the devices before it declined."""

    node: str
    op_type: str
    device: str
    reason: str
    declined: dict[str, str] = field(default_factory=dict)


def place(graph: Graph, devices: list[Device], precision: str, pins: dict[str, str] | None = None,
          deny: dict[str, list[str]] | None = None, fallback: str = FALLBACK_DEVICE,
          prefer: str = "order", higher: dict[str, str] | None = None,
          dynamic: dict[str, str] | None = None) -> dict[str, Decision]:
    """Decide a device for every node of ``graph``; UnsupportedOperatorError lists nodes no device takes.

    When no device offers ``precision`` for a node, the fallback device (the
    CPU) takes it at fp32, and the decision says so. ``higher`` (node -> why)
    names nodes a quantized precision computes in float: only the fallback
    device and devices whose Description says ``float_in_quantized`` take them, the others are declined
    with that reason. ``dynamic``
    (node -> why) names nodes that need dynamic activation quantization: a
    device whose Description does not list it declines them.
    """
    pins = pins or {}
    higher = higher or {}
    dynamic = dynamic or {}
    deny = deny or {}
    descriptions = {d.name: d.describe() for d in devices}
    decisions: dict[str, Decision] = {}
    homeless: list[tuple[Node, dict[str, str]]] = []
    for node in graph.nodes:
        cand = Candidate(node, [info_of(graph.tensors[n]) if n else None for n in node.inputs],
                         [info_of(graph.tensors[n]) if n else None for n in node.outputs], precision)
        declined: dict[str, str] = {}
        denied = set(deny.get(node.name, ())) | set(deny.get(node.op_type, ()))
        pinned = pins.get(node.name) or pins.get(node.op_type)
        chosen, reason = None, ""
        accepted: list[str] = []
        for device in devices:
            if pinned and device.name != pinned:
                declined[device.name] = f"node is pinned to '{pinned}'"
                continue
            if device.name in denied:
                declined[device.name] = "denied by the user"
                continue
            why = _why_not(device, descriptions[device.name], cand)
            if why:
                declined[device.name] = why
                continue
            # NOTE: after the device's own verdict, so a device that lacks the op says that first
            if node.name in higher and device.name != fallback and not pinned \
                    and not descriptions[device.name].float_in_quantized:
                declined[device.name] = f"kept in float32 under {precision}: {higher[node.name]}"
                continue
            if node.name in dynamic and "dynamic" not in descriptions[device.name].activation_quantization:
                declined[device.name] = (f"quantizes activations statically only (Description."
                                         f"activation_quantization={descriptions[device.name].activation_quantization}"
                                         f"); this node needs dynamic quantization: {dynamic[node.name]}")
                continue
            if prefer != "order" and not pinned:
                accepted.append(device.name)
                continue
            chosen = device.name
            reason = "pinned by the user" if pinned else ("first device that accepts it" if not declined else
                                                          "first device that accepts it after " + ", ".join(declined))
            break
        if accepted:
            chosen, reason = _preferred(accepted, descriptions, precision, prefer)
            declined.update({name: f"{reason.split(':')[0]} chose '{chosen}'" for name in accepted if name != chosen})
        if chosen is None and fallback in {d.name for d in devices} and not pinned and fallback not in denied:
            cpu = next(d for d in devices if d.name == fallback)
            why = _why_not(cpu, descriptions[fallback], Candidate(node, cand.inputs, cand.outputs, "fp32"))
            if not why:
                chosen = fallback
                reason = f"fallback: no device runs it at {precision}; the CPU runs it at fp32"
        if chosen is None:
            homeless.append((node, declined))
            continue
        decisions[node.name] = Decision(node.name, node.op_type, chosen, reason, declined)
    if homeless:
        lines = "; ".join(f"{where(n)}: " + ", ".join(f"{d}: {r}" for d, r in why.items()) for n, why in homeless[:10])
        raise UnsupportedOperatorError(
            f"{len(homeless)} node(s) have no device that can run them: {lines}",
            [(n.op_type, n.opset, n.name) for n, _ in homeless])
    return decisions


def _figure(description, precision: str, prefer: str) -> float:
    perf = description.performance.get(precision)
    if perf is None:
        return 1.0
    return perf.exec_time if prefer == "speed" else perf.power_usage


def _preferred(accepted: list[str], descriptions: dict, precision: str, prefer: str) -> tuple[str, str]:
    """The accepting device with the lowest exec_time (speed) or power_usage (power) at ``precision``;
    the earliest in priority order among equals. Returns (device, reason)."""
    figures = {name: _figure(descriptions[name], precision, prefer) for name in accepted}
    best = min(accepted, key=lambda name: figures[name])       # NOTE: min keeps the first of equals
    what = "exec_time" if prefer == "speed" else "power_usage"
    listed = ", ".join(f"{name} {figures[name]:g}" for name in accepted)
    return best, f"prefer={prefer}: lowest {what} at {precision} among the devices that accept it ({listed})"


def _why_not(device: Device, description, cand: Candidate) -> str:
    node = cand.node
    if node.op_type not in description.ops:
        return f"does not support op {node.op_type}"
    if cand.precision not in description.precisions:
        return f"does not support precision {cand.precision} (it has {', '.join(description.precisions)})"
    if device.allocator is not None and device.allocator.evaluation is not None:
        verdict = device.allocator.evaluation(device, cand)
        if not verdict.ok:
            return verdict.reason or "its evaluation declined the node"
    return ""
