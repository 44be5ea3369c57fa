"""Row kernels: one workgroup per row of length L (stride ``inner``), reducing through workgroup memory.
Softmax, LogSoftmax and LayerNormalization are two such reductions and an elementwise pass."""
from __future__ import annotations

import math

from nnhal.device.webgpu.kernels._wgsl import MAX_GROUPS, decl
from nnhal.device.webgpu.kernels.base import Launch

THREADS = 64


def reduce_step(var: str, op: str) -> str:
    """WGSL statements reducing ``var`` over the workgroup (``op`` is 'max' or '+'); leaves it in ``red[0]``."""
    combine = "max(red[lid], red[lid + s])" if op == "max" else "red[lid] + red[lid + s]"
    return f"""  red[lid] = {var};
  workgroupBarrier();
  for (var s = {THREADS // 2}u; s > 0u; s = s >> 1u) {{
    if (lid < s) {{ red[lid] = {combine}; }}
    workgroupBarrier();
  }}
  let {var}_all = red[0];
  workgroupBarrier();
"""


def row_launch(inputs: list[tuple[str, str]], outputs: list[tuple[str, str]], rows: int, length: int, inner: int,
               body: str, label: str) -> Launch:
    """``body`` runs per row ``r`` with ``base`` (its first element) and ``lid``; it writes ``out`` (and
    ``out1``, ``out2``, ... for further outputs)."""
    decls = [decl(i, f"in{i}", elem, False) for i, (_, elem) in enumerate(inputs)]
    decls += [decl(len(inputs) + j, "out" + (str(j) if j else ""), elem, True) for j, (_, elem) in enumerate(outputs)]
    gx = min(rows, MAX_GROUPS)
    gy = math.ceil(rows / gx)
    source = f"""{chr(10).join(decls)}
var<workgroup> red: array<f32, {THREADS}>;
const L: u32 = {length}u;
const INNER: u32 = {inner}u;
@compute @workgroup_size({THREADS})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
  let r = wg.y * {gx}u + wg.x;
  if (r >= {rows}u) {{ return; }}
  let base = (r / INNER) * L * INNER + r % INNER;
{body}}}
"""
    # NOTE: the early return is uniform per workgroup (r depends on the workgroup id only), so barriers stay legal
    return Launch(source, tuple(n for n, _ in inputs) + tuple(n for n, _ in outputs), (gx, gy, 1), label)
