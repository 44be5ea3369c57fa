"""Stage: device-independent passes (fusions, cleanups) on the inferred graph, at the asked precision."""
from __future__ import annotations

from dataclasses import dataclass

from nnhal.optimizer.passes import run_passes
from nnhal.pipeline.inference_and_folding import Inferred


@dataclass
class Passed:
    inferred: Inferred                  # its graph rewritten in place
    pass_report: dict[str, int]         # pass name -> rewrites it made ("fuse_qdq" first)


def run_device_independent_passes(inferred: Inferred, precision: str) -> Passed:
    return Passed(inferred, {"fuse_qdq": inferred.fused_qdq, **run_passes(inferred.graph, precision)})
