"""One invocation per output element, computing it from the output coordinates: the shape of every
data-movement kernel (Transpose, Slice, Pad, Concat, Gather, Resize, ...) and of the windowed ones."""
from __future__ import annotations

import numpy as np

from nnhal.device.webgpu.kernels._wgsl import coords, decl, grid
from nnhal.device.webgpu.kernels.base import Emitter, Launch


def index_launch(em: Emitter, inputs: list[str], output: str, body: list[str], label: str,
                 shape: tuple[int, ...] | None = None, helpers: str = "", store: str = "idx") -> Launch:
    """``body`` sets ``val`` from ``c0..`` (coordinates of ``shape``, default the output's) and ``in0..``;
    it is stored at ``store`` (an expression the body may define; default the output element itself)."""
    shape = tuple(int(d) for d in (em.shape(output) if shape is None else shape))
    decls = [decl(i, f"in{i}", em.elem(n), False) for i, n in enumerate(inputs)]
    decls.append(decl(len(inputs), "out", em.elem(output), True))
    total = int(np.prod(shape, dtype=np.int64))
    header, groups = grid(total)
    lines = coords(shape, "idx") if shape else []
    source = ("\n".join(decls) + "\n" + helpers + "\n" + header + "".join(f"  {s}\n" for s in lines + body)
              + f"  out[{store}] = val;\n}}\n")
    return Launch(source, tuple(inputs) + (output,), groups, label)


def flat(terms: list[tuple[str, int]]) -> str:
    """sum(coordinate * stride) as WGSL u32."""
    parts = [f"{c} * {s}u" if s != 1 else c for c, s in terms if s != 0]
    return " + ".join(parts) or "0u"
