"""The tiled GEMM every matrix kernel shares: C[b, m, n] = sum_k A(b, m, k) * B(b, k, n).

A workgroup computes a TM x TN tile of C; each invocation a 4 x 4 block of it in registers. Per
step of TK along k the workgroup stages an A tile and a B tile in workgroup memory. The caller
supplies how to read A and B (``load_a``/``load_b`` WGSL functions, which is where Conv's implicit
im2col lives), an optional per-(b, m, n) bias expression, and the epilogue (the fused elementwise
group) applied before the store to the flat index (b * M + m) * N + n.

NOTE: on a CPU adapter (lavapipe, SwiftShader) workgroup memory is ordinary memory and every barrier
switches coroutines: there the same GEMM runs without it (``direct_launch``), 3-4x faster on lavapipe.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nnhal.device.webgpu.kernels._eltwise import identity_epilogue
from nnhal.device.webgpu.kernels._wgsl import decl, lit
from nnhal.device.webgpu.kernels.base import Epilogue, EpilogueMaker, Launch

TK = 16
RM = RN = 4


@dataclass(frozen=True)
class GemmSpec:
    batch: int
    m: int
    n: int
    k: int
    inputs: tuple[tuple[str, str], ...]   # (tensor name, element type) bound at 0.. as in0, in1, ...
    load_a: str                           # WGSL: fn load_a(b: u32, m: u32, k: u32) -> f32
    load_b: str                           # WGSL: fn load_b(b: u32, k: u32, n: u32) -> f32
    bias: str = ""                        # WGSL expression in b, m, n added to the sum
    alpha: float = 1.0
    label: str = "gemm"


def _tile(extent: int) -> int:
    return 64 if extent >= 48 else 32 if extent >= 24 else 16


def _prelude(spec: GemmSpec, output: str, make_epilogue: EpilogueMaker | None, em) -> tuple[str, tuple[str, ...]]:
    """Bindings, sizes, the loaders, the epilogue and ``store``: the part both GEMM shapes share."""
    first = len(spec.inputs) + 1
    epi: Epilogue = make_epilogue(first) if make_epilogue is not None else identity_epilogue(em, output)
    decls = [decl(i, f"in{i}", elem, False) for i, (_, elem) in enumerate(spec.inputs)]
    decls.append(decl(len(spec.inputs), "out", em.elem(epi.output), True))
    scale = "" if spec.alpha == 1.0 else f" * {lit(spec.alpha)}"
    bias = f" + {spec.bias}" if spec.bias else ""
    text = f"""{chr(10).join(decls)}
{epi.decls}
const M: u32 = {spec.m}u;
const N: u32 = {spec.n}u;
const K: u32 = {spec.k}u;
{spec.load_a}
{spec.load_b}
{epi.function}
fn store(b: u32, m: u32, n: u32, acc: f32) {{
  if (m >= M || n >= N) {{ return; }}
  let idx = (b * M + m) * N + n;
  out[idx] = epilogue(acc{scale}{bias}, idx);
}}
"""
    return text, tuple(name for name, _ in spec.inputs) + (epi.output,) + epi.tensors


def gemm_launch(spec: GemmSpec, output: str, make_epilogue: EpilogueMaker | None, em) -> Launch:
    if em.direct_gemm:
        return direct_launch(spec, output, make_epilogue, em, 8 if spec.m >= 64 else 4, 4)
    tm, tn = _tile(spec.m), _tile(spec.n)
    wx, wy = tn // RN, tm // RM
    nt = wx * wy
    head, tensors = _prelude(spec, output, make_epilogue, em)
    inner = []
    inner.append(f"    let ab = kk * {tm}u + lid.y * {RM}u;")
    inner.append(f"    let bb = kk * {tn}u + lid.x * {RN}u;")
    for r in range(RM):
        inner.append(f"    let a{r} = As[ab + {r}u];")
    for c in range(RN):
        inner.append(f"    let b{c} = Bs[bb + {c}u];")
    for r in range(RM):
        for c in range(RN):
            inner.append(f"    acc{r}{c} = fma(a{r}, b{c}, acc{r}{c});")
    stores = []
    for r in range(RM):
        for c in range(RN):
            stores.append(f"  store(b, m0 + lid.y * {RM}u + {r}u, n0 + lid.x * {RN}u + {c}u, acc{r}{c});")
    source = f"""{head}
var<workgroup> As: array<f32, {tm * TK}>;
var<workgroup> Bs: array<f32, {tn * TK}>;
@compute @workgroup_size({wx}, {wy}, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {{
  let b = wg.z;
  let m0 = wg.y * {tm}u;
  let n0 = wg.x * {tn}u;
{chr(10).join(f"  var acc{r}{c} = 0.0;" for r in range(RM) for c in range(RN))}
  for (var k0 = 0u; k0 < K; k0 = k0 + {TK}u) {{
    for (var i = li; i < {tm * TK}u; i = i + {nt}u) {{
      let mm = i / {TK}u;
      let kk = i % {TK}u;
      var v = 0.0;
      if (m0 + mm < M && k0 + kk < K) {{ v = load_a(b, m0 + mm, k0 + kk); }}
      As[kk * {tm}u + mm] = v;
    }}
    for (var i = li; i < {tn * TK}u; i = i + {nt}u) {{
      let kk = i / {tn}u;
      let nn = i % {tn}u;
      var v = 0.0;
      if (n0 + nn < N && k0 + kk < K) {{ v = load_b(b, k0 + kk, n0 + nn); }}
      Bs[kk * {tn}u + nn] = v;
    }}
    workgroupBarrier();
    for (var kk = 0u; kk < {TK}u; kk = kk + 1u) {{
{chr(10).join(inner)}
    }}
    workgroupBarrier();
  }}
{chr(10).join(stores)}
}}
"""
    groups = (math.ceil(spec.n / tn), math.ceil(spec.m / tm), spec.batch)
    return Launch(source, tensors, groups, spec.label)


def direct_launch(spec: GemmSpec, output: str, make_epilogue: EpilogueMaker | None, em, rm: int, rn: int) -> Launch:
    """Register blocking without workgroup memory: each invocation reads its 4 rows of A and 4 columns of B."""
    wx, wy = 8, 8
    head, tensors = _prelude(spec, output, make_epilogue, em)
    lines = []
    for r in range(rm):
        lines.append(f"    var a{r} = 0.0; if (m0 + {r}u < M) {{ a{r} = load_a(b, m0 + {r}u, k); }}")
    for c in range(rn):
        lines.append(f"    var b{c} = 0.0; if (n0 + {c}u < N) {{ b{c} = load_b(b, k, n0 + {c}u); }}")
    for r in range(rm):
        for c in range(rn):
            lines.append(f"    acc{r}{c} = fma(a{r}, b{c}, acc{r}{c});")
    stores = [f"  store(b, m0 + {r}u, n0 + {c}u, acc{r}{c});" for r in range(rm) for c in range(rn)]
    source = f"""{head}
@compute @workgroup_size({wx}, {wy}, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
  let b = gid.z;
  let m0 = gid.y * {rm}u;
  let n0 = gid.x * {rn}u;
  if (m0 >= M || n0 >= N) {{ return; }}
{chr(10).join(f"  var acc{r}{c} = 0.0;" for r in range(rm) for c in range(rn))}
  for (var k = 0u; k < K; k = k + 1u) {{
{chr(10).join(lines)}
  }}
{chr(10).join(stores)}
}}
"""
    groups = (math.ceil(spec.n / (rn * wx)), math.ceil(spec.m / (rm * wy)), spec.batch)
    return Launch(source, tensors, groups, spec.label)
