"""The tiled GEMM every matrix kernel shares: C[b, m, n] = sum_k A(b, m, k) * B(b, k, n).

A workgroup computes a TM x TN tile of C; each invocation a 4 x 4 block of it in registers. Per
step of TK along k the workgroup stages an A tile and a B tile in workgroup memory. The caller
supplies how to read A and B (``load_a``/``load_b`` WGSL functions, which is where Conv's implicit
im2col lives), an optional per-(b, m, n) bias expression, and the epilogue (the fused elementwise
group) applied before the store to the flat index (b * M + m) * N + n.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nnhal.device.webgpu.kernels._wgsl import decl, lit
from nnhal.device.webgpu.kernels.base import Epilogue, EpilogueMaker, Launch
from nnhal.device.webgpu.kernels._eltwise import identity_epilogue

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


def gemm_launch(spec: GemmSpec, output: str, make_epilogue: EpilogueMaker | None, em) -> Launch:
    tm, tn = _tile(spec.m), _tile(spec.n)
    wx, wy = tn // RN, tm // RM
    nt = wx * wy
    first = len(spec.inputs) + 1
    epi: Epilogue = make_epilogue(first) if make_epilogue is not None else identity_epilogue(em, output)
    out_elem = em.elem(epi.output)
    decls = [decl(i, f"in{i}", elem, False) for i, (_, elem) in enumerate(spec.inputs)]
    decls.append(decl(len(spec.inputs), "out", out_elem, True))
    scale = "" if spec.alpha == 1.0 else f" * {lit(spec.alpha)}"
    bias = f" + {spec.bias}" if spec.bias else ""
    inner = []
    for kk in ("kk",):
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
    source = f"""{chr(10).join(decls)}
{epi.decls}
const M: u32 = {spec.m}u;
const N: u32 = {spec.n}u;
const K: u32 = {spec.k}u;
var<workgroup> As: array<f32, {tm * TK}>;
var<workgroup> Bs: array<f32, {tn * TK}>;
{spec.load_a}
{spec.load_b}
{epi.function}
fn store(b: u32, m: u32, n: u32, acc: f32) {{
  if (m >= M || n >= N) {{ return; }}
  let idx = (b * M + m) * N + n;
  out[idx] = epilogue(acc{scale}{bias}, idx);
}}
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
    tensors = tuple(name for name, _ in spec.inputs) + (epi.output,) + epi.tensors
    return Launch(source, tensors, groups, spec.label)
