"""If, Loop and Scan on the cpu device: the host kernels, their bodies compiled by the cpu device's own plan
(fusions, channels-last layout, a planned arena) passed explicitly, not through a global hook."""
from __future__ import annotations

import math
from dataclasses import replace

from nnhal.errors import InternalError
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import TensorKind
from nnhal.hostkernels.graphrun import Compiler, Runnable
from nnhal.hostkernels.op_identity import IdentityKernel
from nnhal.hostkernels.op_if import IfKernel
from nnhal.hostkernels.op_loop import LoopKernel
from nnhal.hostkernels.op_scan import ScanKernel
from nnhal.operator.base import infer_body_graph

_body_compiler: list[Compiler] = []


def install_body_compiler(compiler: Compiler) -> None:
    """Called once by nnhal.device.cpu.plan with its compile_nodes (the plan imports this package's select,
    so this module takes the plan's compiler as an argument rather than importing the plan back)."""
    _body_compiler[:] = [compiler]


def plan_iteration_body(graph: Graph, nodes: list[Node], inputs: list[str], outputs: list[str]) -> Runnable:
    """A Loop or Scan body's or an If branch's cpu plan (by the compiler the cpu plan installed), run once per
    iteration: a body output made by an Identity or a static view (of a body input, of a step's output, of an
    outer-scope tensor) is that tensor, not a per-iteration copy.

    NOTE: safe because the Loop and Scan drivers (hostkernels/op_loop.py, op_scan.py) run the iterations
    through the plan's ``iterate()`` (plan.Iteration: two buffer sets taken in turn, an input passed through
    into the next iteration copied) and copy whatever they keep of a body's outputs: the final states are
    copied (own) or stored into the node's outputs, and a scan output is copied into its row or kept as a
    copy. An If runs its branch on one buffer set held until it has stored or copied the branch's outputs into
    its own (hostkernels/op_if.py)."""
    if not _body_compiler:
        raise InternalError("the cpu device's body compiler is not installed (import nnhal.device.cpu.plan first)")
    return _body_compiler[0](graph, nodes, inputs, outputs, borrowed=True)


def binds_output(node: Node, kernel, run) -> bool:
    """Whether ``node`` run by ``kernel`` (prepared as ``run``) gives its input as it is (an Identity) or a
    view of it (kernels/view.py), so a borrowed body's output it makes needs no buffer of its own."""
    identity = isinstance(kernel, IdentityKernel) and node.op_type == "Identity" and not node.domain \
        and len(node.inputs) == 1
    return identity or getattr(run, "view_of", None) is not None


class _Planned:
    """Before the host kernel: the same run, its bodies planned by the cpu device."""

    name = "planned"
    compiler = staticmethod(plan_iteration_body)

    def score(self, node, ins, outs) -> int:
        return 2


class IfPlanned(_Planned, IfKernel):
    """If, branches planned by the cpu device (outputs not copied in the branch: the node copies them)."""


class LoopPlanned(_Planned, LoopKernel):
    """Loop, body planned by the cpu device (its outputs not copied per iteration)."""


class ScanPlanned(_Planned, ScanKernel):
    """Scan, body planned by the cpu device (its outputs not copied per iteration)."""


def iterates(nodes: list[Node]) -> bool:
    """Whether a plan holding these nodes runs a Loop or Scan body, one step per iteration.

    NOTE: such a plan runs on the pools whatever its own products' sizes (cpu_device.cpu_pre_run): a body's
    products are one step's (a GEMV of an LSTM step), and with the pools off the BLAS threads woke for each of
    them: stream_loop_lstm at 2 threads took 14.4 ms wall for 6.2 ms of CPU, 3.1 ms with the pools, which run a
    product this small on the calling thread and still split a large one."""
    return any(node.op_type in ("Loop", "Scan") and not node.domain for node in nodes)


def branch_products(graph: Graph, node: Node, products: frozenset[str]) -> list[int]:
    """The output sizes of the ``products`` nodes (Conv, MatMul, Gemm) of an If's branches, inferred from the
    outer tensors they read (``graph``'s): a model wrapped whole in an If chooses its threads by its branches'
    products as the same model unwrapped would. Empty for another node or where inference cannot tell."""
    if node.op_type != "If" or node.domain:
        return []
    sizes = []
    for attr in ("then_branch", "else_branch"):
        sizes += _body_sizes(graph, node.attrs[attr], node.implicit_inputs, products)
    return sizes


def _body_sizes(graph: Graph, body: Graph, implicit: list[str], products: frozenset[str]) -> list[int]:
    body = body.copy()
    for name in implicit:
        t = graph.tensors.get(name)
        if t is not None:           # an outer-scope name: the outer tensor, whatever the body declared
            body.tensors[name] = replace(t) if t.kind is TensorKind.CONSTANT else replace(t, kind=TensorKind.INPUT)
    try:
        infer_body_graph(body)
    except Exception:  # noqa: BLE001 - NOTE: a thread choice, never a failed prepare: the run infers it again
        return []
    sizes = []
    for node in body.nodes:
        t = body.tensors.get(node.outputs[0]) if node.op_type in products and node.outputs else None
        if t is not None and t.shape is not None and all(isinstance(d, int) for d in t.shape):
            sizes.append(math.prod(t.shape))
    return sizes


IMPLEMENTATIONS = (IfPlanned, LoopPlanned, ScanPlanned)
