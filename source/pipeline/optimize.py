"""Stage: per-device optimize. Each subgraph gets its context's device options, then its device's
``optimize_graph(subgraph, precision)`` (the mixed-precision hook), which may return a rewritten
subgraph; a hook that raises re-places that subgraph on the fallback device (reported), or fails the
prepare when strict."""
from __future__ import annotations

from nnhal.scheduler.default import fall_back
from nnhal.scheduler.scheduler import Execution


def optimize(ex: Execution, device_options: dict) -> None:
    """Rewrite ``ex.subgraphs`` in place with what each device's optimize_graph returns."""
    subgraphs = ex.subgraphs
    for i, sg in enumerate(subgraphs):
        sg.device_options = device_options.get(sg.device)
        device = ex.devices[sg.device]
        if device.optimizer is not None and device.optimizer.optimize_graph is not None:
            try:
                subgraphs[i] = device.optimizer.optimize_graph(sg, sg.precision) or sg
            except Exception as exc:
                fall_back(ex, sg, "optimize_graph", exc, prepare=False)
