"""Stage: the precision plan. Under int8/uint8, the int8 plan (nnhal.optimizer.outliers): which activations
are smoothed and by how much, which nodes stay in higher precision, which products quantize dynamically.
Smoothing reads per-channel extremes: the calibration table's, else those measured on the bound inputs
(and, where every device quantizes activations dynamically, rows of them to measure smoothing's alpha)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnhal.device.manager import find_device
from nnhal.optimizer.outliers import SAMPLE_ROWS, Int8Plan, plan_int8, token_activations, token_statistics
from nnhal.optimizer.quantize import QUANTIZED
from nnhal.pipeline.passes import Passed
from nnhal.pipeline.request import Request


@dataclass
class CalibrationMemo:
    """What a mixed-precision search calibrates once on the bound inputs and every later prepare of the
    same graph on the same inputs reuses: the per-channel extremes smoothing reads, rows of the token
    activations (measured smoothing), the smoothing measured on them, and the activation ranges."""

    channels: dict[str, tuple] | None = None
    samples: dict[str, np.ndarray] | None = None
    alphas: dict = field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] | None = None


def plan_precision(request: Request, passed: Passed, memo: CalibrationMemo | None = None) -> Int8Plan | None:
    """The int8 plan under a quantized precision (the graph may be rewritten: smoothing); else None."""
    options, graph, inputs = request.options, passed.inferred.graph, request.inputs
    if options.precision not in QUANTIZED:
        return None
    samples: dict[str, np.ndarray] = {}
    if options.calibration is not None:
        channels = getattr(options.calibration, "channels", {})
    elif memo is not None and memo.channels is not None:
        channels, samples = memo.channels, memo.samples or {}
    else:
        devices = request.context.devices
        dynamic = all("dynamic" in find_device(n).describe().activation_quantization for n in devices)
        channels, samples = token_statistics(graph, inputs, token_activations(graph), SAMPLE_ROWS if dynamic
                                             else 0) if all(n in inputs for n in graph.inputs) else ({}, {})
        if memo is not None:
            memo.channels, memo.samples = channels, samples
    return plan_int8(graph, channels, samples, signed=options.precision == "int8",
                     alphas=memo.alphas if memo is not None else None,
                     block=None if memo is not None else dynamic_block(request))


# NOTE: a mixed-precision search (the one caller with a memo) keeps the core's blocks of 8: its bound is on the
# output error, and on MiniLM per-block products keep over half of the multiply-adds int8 within 1% where whole
# rows (about 3x the per-node error) keep 14%
def dynamic_block(request: Request) -> int | None:
    """The block along K the context's dynamic devices scale rows by (Description.dynamic_block), when
    they agree; else None (quantize.BLOCK)."""
    blocks = {d.dynamic_block for d in (find_device(n).describe() for n in request.context.devices)
              if "dynamic" in d.activation_quantization}
    return blocks.pop() if len(blocks) == 1 else None
