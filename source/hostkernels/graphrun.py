"""Running a whole (inferred) graph on the host kernels: control-flow bodies, constant folding of
Loop/Scan/If, and calibration runs of the optimizer.

``compile_nodes(graph, nodes, inputs, outputs)`` returns a runnable whose ``run(values)`` reads
``inputs`` from and writes ``outputs`` (and every intermediate it was asked for) into ``values``.

It is a plain interpreter: each node's best host kernel, prepared once, run in order. A device that
compiles host-kernel graphs better (the cpu device: fusions, channels-last layout, a planned arena) passes
its compiler explicitly: to its control-flow kernels (their ``compiler``; the cpu device's If/Loop/Scan in
device/cpu/kernels/control.py), and as its record's ``Optimizer.compile_graph``, which the optimizer's
calibration and sensitivity runs take (``nnhal.device.manager.graph_compiler``). The results are the
same either way, only the speed differs.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from nnhal.errors import DeviceError, where, wrapped
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import TensorKind
from nnhal.hostkernels.select import select
from nnhal.operator.base import Info


class Runnable(Protocol):
    def run(self, values: dict[str, np.ndarray], check: bool = False) -> None:
        """Read inputs from and write outputs to ``values``; ``check`` verifies every kernel output's
        dtype and shape against inference where the runnable can (NNHAL_CHECK)."""

    def call(self, arrays: Sequence[np.ndarray], check: bool = False) -> list[np.ndarray]:
        """The same run, positional: ``arrays`` in the order of the inputs it was compiled for, the outputs
        returned in the order of its outputs (control-flow bodies call it once per iteration)."""


Compiler = Callable[[Graph, list[Node], list[str], list[str]], Runnable]


@dataclass(frozen=True)
class _Step:
    node: Node
    run: Callable
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Interpreter:
    """The default runnable: steps in order over a dict of named arrays (re-entrant: no state)."""

    constants: dict[str, np.ndarray]
    steps: tuple[_Step, ...]
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ()

    def call(self, arrays: Sequence[np.ndarray], check: bool = False) -> list[np.ndarray]:
        values = dict(zip(self.inputs, arrays))
        self.run(values, check)
        return [values[name] for name in self.outputs]

    def run(self, values: dict[str, np.ndarray], check: bool = False) -> None:
        env = {**self.constants, **values}
        for step in self.steps:
            # out of memory passes: the caller turns it into a LimitError
            with wrapped(lambda exc: DeviceError(f"{where(step.node)}: host kernel failed: {type(exc).__name__}: "
                                                 f"{exc}"), passthrough=(MemoryError,)):
                result = step.run([env.get(n) if n else None for n in step.inputs], [None] * len(step.outputs))
            for name, r in zip(step.outputs, result):
                if name:
                    env[name] = np.asarray(r)
        for name in self.outputs:
            values[name] = env[name]


def tensor_info(graph: Graph, name: str) -> Info | None:
    """What inference knows of tensor ``name`` of ``graph``: None for an absent input, the value of a
    constant, unknown dtype and shape for a name the graph does not hold."""
    if not name:
        return None
    t = graph.tensors.get(name)
    if t is None:
        return Info(None, None)
    return Info(t.dtype, t.shape, t.value if t.kind is TensorKind.CONSTANT else None)


def interpret(graph: Graph, nodes: list[Node], inputs: list[str], outputs: list[str]) -> Interpreter:
    """The default compiler: the best host kernel of every node, prepared once."""
    steps = []
    for node in nodes:
        ins = [tensor_info(graph, n) for n in node.all_inputs]
        outs = [tensor_info(graph, n) or Info(None, None) for n in node.outputs]
        kernel = select(node, ins[:len(node.inputs)], outs)
        steps.append(_Step(node, kernel.prepare(node, ins[:len(node.inputs)], outs), tuple(node.all_inputs),
                           tuple(node.outputs)))
    constants = {n: t.value for n, t in graph.tensors.items() if t.kind is TensorKind.CONSTANT}
    return Interpreter(constants, tuple(steps), tuple(outputs), tuple(inputs))


def compile_nodes(graph: Graph, nodes: list[Node], inputs: list[str], outputs: list[str]) -> Runnable:
    """A runnable for ``nodes`` of ``graph`` reading ``inputs`` and producing ``outputs`` (the interpreter)."""
    return interpret(graph, nodes, inputs, outputs)
