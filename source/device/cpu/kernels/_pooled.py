"""Host kernels whose matrix products run on the cpu device's pool.

A host kernel whose products go through its ``matmul`` attribute (numpy's, in the reference) gets a cpu
variant by putting :class:`Pooled` before it: the same computation with :func:`parallel.matmul` (the
product split over the cpu device's threads), chosen over the reference by one more point of score.
"""
from __future__ import annotations

from nnhal.device.cpu import parallel


class Pooled:
    """Mixin for a host kernel class with a ``matmul`` attribute: products on the cpu device's pool."""

    name = "pooled"
    matmul = staticmethod(parallel.matmul)

    def score(self, node, ins, outs) -> int:
        s = super().score(node, ins, outs)
        return s + 1 if s > 0 else 0
