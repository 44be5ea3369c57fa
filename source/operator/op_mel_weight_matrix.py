"""MelWeightMatrix: triangular mel filterbank weights, (dft_length // 2 + 1, num_mel_bins)."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._reduce import output_datatype, scalar_of
from nnhal.operator.base import Info, Prototype


class MelWeightMatrix(Prototype):
    op_type = "MelWeightMatrix"
    versions = (17,)
    inputs = (5, 5)
    attributes = {"output_datatype": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        bins, length = scalar_of(ins[0]), scalar_of(ins[1])
        rows = None if length is None else int(length) // 2 + 1
        return [Info(output_datatype(node), (rows, None if bins is None else int(bins)))]
