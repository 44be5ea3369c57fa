"""Stacked (hostkernels/_qrc.py): a Loop or Scan output written row by row."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.errors import ShapeError
from nnhal.graph.node import Node
from nnhal.hostkernels._qrc import Stacked


@pytest.mark.parametrize("axis,reverse", [(0, False), (1, False), (0, True), (-1, True)])
def test_rows_are_written_in_place_and_a_row_of_another_shape_is_refused(axis, reverse):
    node = Node("scan", "Scan", ["x"], ["y"])
    rows = [np.full((2, 3), t, np.float32) for t in range(4)]
    acc = Stacked(node, None, 4, axis, reverse)
    for r in rows:
        acc.add(r)
    want = np.stack(rows[::-1] if reverse else rows, axis=axis % 3)
    np.testing.assert_array_equal(acc.result((0,), np.float32), want)
    bad = Stacked(node, None, 4, axis, reverse)
    bad.add(rows[0])
    with pytest.raises(ShapeError, match="scan output shapes differ"):
        bad.add(np.zeros((3, 2), np.float32))
