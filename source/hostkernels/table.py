"""The explicit table of host kernels: op_type -> module.

Each module ``nnhal.hostkernels.op_<snake_name>`` defines
``IMPLEMENTATIONS``: the Kernel classes for that op. At pre_run the kernel
with the highest ``score`` for a node wins; ``NNHAL_CPU_REFERENCE=1`` forces
the implementation named "reference".
"""
from __future__ import annotations

from nnhal.operator.table import MS_OPS, NNHAL_OPS, ONNX_OPS

# NOTE: the host kernels implement every operator that has a prototype, in a module of the same
# name here (constant folding may meet any of them). A device with fewer kernels writes its own table.
KERNELS: dict[str, str] = dict(ONNX_OPS)
DOMAINS: dict[str, dict[str, str]] = {"": KERNELS, "ai.onnx": KERNELS, "com.microsoft": dict(MS_OPS),
                                     "ai.nnhal": dict(NNHAL_OPS)}
