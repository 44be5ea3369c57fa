"""Nodes the optimizer's passes write: normalized as the importer normalizes a model's own."""
from __future__ import annotations

from nnhal.graph.node import Node


def make_node(name: str, op: str, inputs: list[str], outputs: list[str], attrs: dict, opset: int,
              domain: str = "") -> Node:
    """A normalized internal node; an op newer than the model's opset gets its first version."""
    from nnhal.operator.table import get_prototype

    proto = get_prototype(domain, op)
    version = (proto.version_for(opset) if not domain else None) or proto.versions[0]
    node = Node(name, op, inputs, outputs, dict(attrs), domain, max(opset, version) if not domain else 1, version)
    proto.normalize(node)
    return node
