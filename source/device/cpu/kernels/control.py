"""If, Loop and Scan on the cpu device: the host kernels, their bodies compiled by the cpu device's own plan
(fusions, channels-last layout, a planned arena) passed explicitly, not through a global hook."""
from __future__ import annotations

from nnhal.errors import InternalError
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.hostkernels.graphrun import Compiler, Runnable
from nnhal.hostkernels.op_if import IfKernel
from nnhal.hostkernels.op_loop import LoopKernel
from nnhal.hostkernels.op_scan import ScanKernel

_body_compiler: list[Compiler] = []


def install_body_compiler(compiler: Compiler) -> None:
    """Called once by nnhal.device.cpu.plan with its compile_nodes (the plan imports this package's select,
    so this module takes the plan's compiler as an argument rather than importing the plan back)."""
    _body_compiler[:] = [compiler]


def plan_body(graph: Graph, nodes: list[Node], inputs: list[str], outputs: list[str]) -> Runnable:
    """A body's cpu plan, by the compiler the cpu plan installed."""
    if not _body_compiler:
        raise InternalError("the cpu device's body compiler is not installed (import nnhal.device.cpu.plan first)")
    return _body_compiler[0](graph, nodes, inputs, outputs)


class _Planned:
    """Before the host kernel: the same run, its bodies planned by the cpu device."""

    name = "planned"
    compiler = staticmethod(plan_body)

    def score(self, node, ins, outs) -> int:
        return 2


class IfPlanned(_Planned, IfKernel):
    """If, branches planned by the cpu device."""


class LoopPlanned(_Planned, LoopKernel):
    """Loop, body planned by the cpu device."""


class ScanPlanned(_Planned, ScanKernel):
    """Scan, body planned by the cpu device."""


IMPLEMENTATIONS = (IfPlanned, LoopPlanned, ScanPlanned)
