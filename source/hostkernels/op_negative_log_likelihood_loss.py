"""NegativeLogLikelihoodLoss on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import LossKernel


class NegativeLogLikelihoodLossKernel(LossKernel):
    op_type = "NegativeLogLikelihoodLoss"


IMPLEMENTATIONS = (NegativeLogLikelihoodLossKernel,)
