"""Stage: placement. First the prepare bounds (the graph's total allocation), then each node to the first
device of the context that describes its op and precision and whose evaluation accepts it, else the
fallback; pins and denials win, ``keep_fp32`` nodes go to the fallback under a quantized precision. Then
the small-group policy (``min_group_size``) moves groups too small to be worth a boundary."""
from __future__ import annotations

from dataclasses import dataclass

from nnhal.device.device import Device
from nnhal.device.manager import FALLBACK_DEVICE, find_device
from nnhal.errors import OptionsError, did_you_mean
from nnhal.graph.graph import Graph
from nnhal.optimizer.budget import check_budget
from nnhal.optimizer.outliers import Int8Plan
from nnhal.optimizer.placement import Decision, place
from nnhal.optimizer.split import enforce_min_group_size
from nnhal.pipeline.passes import Passed
from nnhal.pipeline.request import Request


@dataclass
class Placed:
    devices: list[Device]               # the context's devices, in priority order
    decisions: dict[str, Decision]      # node -> device, with the reason and who declined
    moved_by_min_group: list[str]       # nodes the small-group policy moved to the fallback


def check_node_names(graph: Graph, pins: dict, deny: dict) -> None:
    """Pins and denials must name nodes or op types of the model: a typo would silently change nothing."""
    known = {node.name for node in graph.nodes} | {node.op_type for node in graph.nodes}
    for what, table in (("pins", pins), ("deny", deny)):
        for node in table:
            if node not in known:
                raise OptionsError(f"{what} names '{node}', which is neither a node nor an op type of the "
                                   f"model{did_you_mean(node, known)}")


def place_nodes(request: Request, passed: Passed, plan: Int8Plan | None) -> Placed:
    options, ctx, graph = request.options, request.context, passed.inferred.graph
    check_budget(graph, options.max_graph_bytes, passed.inferred.folded)
    check_node_names(request.graph, ctx.pins, ctx.deny)
    devices = [find_device(n) for n in ctx.devices]
    deny = dict(ctx.deny)
    for name in options.keep_fp32:      # only the fallback device runs a node in fp32 under a quantized precision
        deny[name] = list(deny.get(name, [])) + [d.name for d in devices if d.name != FALLBACK_DEVICE]
    decisions = place(graph, devices, options.precision, ctx.pins, deny, fallback=FALLBACK_DEVICE,
                      higher=plan.higher if plan else None, dynamic=plan.required if plan else None,
                      prefer=options.prefer)
    moved = enforce_min_group_size(graph, decisions, options.min_group_size, fallback=FALLBACK_DEVICE)
    return Placed(devices, decisions, moved)
