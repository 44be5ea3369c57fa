"""The nnhal IR: tensors, nodes, graphs and subgraphs."""
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.graph.tensor import Quantization, Tensor, TensorKind

__all__ = ["Graph", "Node", "Quantization", "Subgraph", "Tensor", "TensorKind"]
