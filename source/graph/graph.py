"""Graphs of the nnhal IR: tensors plus topologically ordered nodes."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from nnhal.errors import ModelError
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind


@dataclass
class Graph:
    """A validated, topologically ordered dataflow graph.

    ``opsets`` maps an operator domain ('' for the default ONNX domain) to the
    opset version the model imports. Nested graphs (If, Loop, Scan bodies) are
    Graph objects stored in their node's attributes; they may read tensors of
    the enclosing graphs (``outer`` names).
    """

    name: str
    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    opsets: dict[str, int] = field(default_factory=dict)
    outer: frozenset[str] = frozenset()

    # ----------------------------------------------------------------- queries
    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"graph '{self.name}' has no tensor named '{name}'") from None

    def producers(self) -> dict[str, Node]:
        """Map tensor name -> node producing it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Map tensor name -> nodes reading it (in node order), implicit reads included."""
        result: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.all_inputs:
                if name:
                    result.setdefault(name, []).append(node)
        return result

    def constant_names(self) -> list[str]:
        return [t.name for t in self.tensors.values() if t.kind is TensorKind.CONSTANT]

    def copy(self) -> "Graph":
        """A copy to rewrite freely: new Tensor and Node objects, the same constant arrays."""
        tensors = {name: replace(t) for name, t in self.tensors.items()}
        nodes = [replace(n, inputs=list(n.inputs), outputs=list(n.outputs), attrs=dict(n.attrs),
                         implicit_inputs=list(n.implicit_inputs)) for n in self.nodes]
        return Graph(self.name, tensors, nodes, list(self.inputs), list(self.outputs), dict(self.opsets), self.outer)

    # -------------------------------------------------------------- validation
    def sort_and_validate(self) -> None:
        """Order nodes topologically (stable) and check the graph is well formed.

        Raises ModelError naming the first offending node or tensor.
        """
        available = set(self.inputs) | set(self.constant_names()) | set(self.outer)
        produced: dict[str, Node] = {}
        for node in self.nodes:
            for out in node.outputs:
                if not out:
                    continue
                if out in produced:
                    raise ModelError(f"tensor '{out}' is produced by both node '{produced[out].name}' and node "
                                     f"'{node.name}'")
                if out in self.inputs or (out in self.tensors and self.tensors[out].is_constant):
                    raise ModelError(f"node '{node.name}' ({node.op_type}) writes '{out}', which is a graph input "
                                     "or constant")
                produced[out] = node
        waiting: dict[int, int] = {}
        readers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            missing = 0
            for name in set(n for n in node.all_inputs if n):
                if name in available:
                    continue
                if name not in produced:
                    raise ModelError(
                        f"node '{node.name}' ({node.op_type}) reads '{name}', which no node, input or initializer "
                        "provides")
                missing += 1
                readers.setdefault(name, []).append(i)
            waiting[i] = missing
        ready = deque(i for i, n in waiting.items() if n == 0)
        order: list[int] = []
        while ready:
            i = ready.popleft()
            order.append(i)
            for out in self.nodes[i].outputs:
                for j in readers.get(out, ()):
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        ready.append(j)
        if len(order) != len(self.nodes):
            stuck = [self.nodes[i].name for i in range(len(self.nodes)) if waiting[i] > 0]
            raise ModelError(f"graph '{self.name}' has a cycle through nodes {stuck[:5]}")
        self.nodes = [self.nodes[i] for i in order]
        for name in self.outputs:
            if name not in produced and name not in available:
                raise ModelError(f"graph output '{name}' is not produced by any node")


def bodies(node: Node) -> list["Graph"]:
    """The nested graphs of a control-flow node."""
    found = []
    for value in node.attrs.values():
        for item in (value if isinstance(value, list) else [value]):
            if isinstance(item, Graph):
                found.append(item)
    return found


def free_names(graph: Graph) -> set[str]:
    """Tensors a (nested) graph reads but does not define itself."""
    defined = set(graph.inputs) | set(graph.constant_names())
    for node in graph.nodes:
        defined |= {o for o in node.outputs if o}
    used: set[str] = set()
    for node in graph.nodes:
        used |= {i for i in node.all_inputs if i}
    used |= set(graph.outputs)
    return used - defined
