"""Stage: calibration. Under int8/uint8, every activation's range (from ``Options.calibration``, the
int8 plan's own ranges, a search's memo, else measured on the bound inputs) and the quantized rewrite
each subgraph runs; nothing under a float precision."""
from __future__ import annotations

from nnhal.optimizer.outliers import Int8Plan
from nnhal.optimizer.quantize import quantize_activations
from nnhal.pipeline.precision_plan import CalibrationMemo
from nnhal.pipeline.request import Request
from nnhal.pipeline.split import Split


def calibrate(request: Request, cut: Split, plan: Int8Plan | None, memo: CalibrationMemo | None = None) -> dict:
    """The activation ranges used (tensor -> (min, max)); empty when nothing was quantized."""
    options = request.options
    ranges = options.calibration
    if ranges is not None and plan is not None:
        ranges = {**ranges, **plan.ranges}
        ranges.update({new: ranges[old] for new, old in plan.aliases.items() if old in ranges})
    if ranges is None and memo is not None:
        ranges = memo.ranges
    table = quantize_activations(cut.graph, cut.subgraphs, options.precision, request.inputs, ranges)
    if memo is not None and memo.ranges is None and table:
        memo.ranges = table
    return table
