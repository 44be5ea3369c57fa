"""Conv (1-D and 2-D; groups, depthwise, strides, dilations, pads) as an implicit GEMM.

Per image and group: C[m = output channel, n = output pixel] = W[m, k] * im2col(X)[k, n] with
k = (input channel, kh, kw); the im2col matrix is never built: ``load_b`` reads X at the tap,
zero outside the pads. The weight is [Cout, Cin/G, KH, KW], already row-major [M, K] per group.
Bias and the fused epilogue (Relu, a residual Add, ...) are applied in the store.
Depthwise convolutions (one input and one output channel per group) take a direct kernel instead,
where a GEMM tile would be 1/64 full.
"""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._eltwise import identity_epilogue
from nnhal.device.webgpu.kernels._gemm import GemmSpec, gemm_launch
from nnhal.device.webgpu.kernels._wgsl import decl, grid
from nnhal.device.webgpu.kernels._window import Window, window
from nnhal.device.webgpu.kernels.base import Emitter, EpilogueMaker, Launch
from nnhal.graph.node import Node

OPS = ("Conv",)
FUSES_EPILOGUE = True


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32":
        return "Conv needs a float32 input of known shape"
    if x.rank not in (3, 4):
        return f"Conv of rank {x.rank} (only 1-D and 2-D convolutions are implemented)"
    for i, info in enumerate(c.inputs[1:], 1):
        if c.node.inputs[i] and (info is None or not info.static or info.dtype is None or info.dtype.name != "float32"):
            return f"Conv input {i} must be float32 of known shape"
    return None


def _geometry(node: Node, em: Emitter) -> tuple[Window, int, int, int, int]:
    x, w = em.shape(node.inputs[0]), em.shape(node.inputs[1])
    win = window(node, x, [int(d) for d in w[2:]])
    return win, int(x[0]), int(x[1]), int(w[0]), int(node.attrs.get("group", 1))


def lower(node: Node, em: Emitter, make_epilogue: EpilogueMaker | None) -> None:
    win, batch, cin, cout, groups = _geometry(node, em)
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    if cin == groups and cout == groups:
        em.launch(_depthwise(node, em, win, batch, cout, has_bias, make_epilogue))
        return
    cin_g, m = cin // groups, cout // groups
    k = cin_g * win.kh * win.kw
    taps = win.kh * win.kw
    hw = win.h * win.w
    load_a = f"""fn load_a(b: u32, m: u32, k: u32) -> f32 {{
  return in1[((b % {groups}u) * {m}u + m) * {k}u + k];
}}"""
    load_b = f"""fn load_b(b: u32, k: u32, n: u32) -> f32 {{
  let ci = k / {taps}u;
  let t = k % {taps}u;
  let ih = i32((n / {win.ow}u) * {win.sh}u + (t / {win.kw}u) * {win.dh}u) - {win.ph};
  let iw = i32((n % {win.ow}u) * {win.sw}u + (t % {win.kw}u) * {win.dw}u) - {win.pw};
  if (ih < 0 || ih >= {win.h} || iw < 0 || iw >= {win.w}) {{ return 0.0; }}
  return in0[(b * {cin_g}u + ci) * {hw}u + u32(ih) * {win.w}u + u32(iw)];
}}"""
    if (win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.ph_end, win.pw_end) == (1, 1, 1, 1, 0, 0, 0, 0):
        # NOTE: a pointwise convolution is a plain GEMM: output pixel n is input pixel n
        load_b = f"""fn load_b(b: u32, k: u32, n: u32) -> f32 {{
  return in0[(b * {cin_g}u + k) * {hw}u + n];
}}"""
    inputs = [(node.inputs[0], "f32"), (node.inputs[1], "f32")]
    bias = ""
    if has_bias:
        inputs.append((node.inputs[2], "f32"))
        bias = f"in2[(b % {groups}u) * {m}u + m]"
    spec = GemmSpec(batch * groups, m, win.oh * win.ow, k, tuple(inputs), load_a, load_b, bias, label="Conv")
    em.launch(gemm_launch(spec, node.outputs[0], make_epilogue, em))


def _depthwise(node: Node, em: Emitter, win: Window, batch: int, channels: int, has_bias: bool,
               make_epilogue: EpilogueMaker | None) -> Launch:
    names = [node.inputs[0], node.inputs[1]] + ([node.inputs[2]] if has_bias else [])
    first = len(names) + 1
    epi = make_epilogue(first) if make_epilogue is not None else identity_epilogue(em, node.outputs[0])
    decls = [decl(i, f"in{i}", "f32", False) for i in range(len(names))]
    decls.append(decl(len(names), "out", em.elem(epi.output), True))
    total = batch * channels * win.oh * win.ow
    header, groups = grid(total)
    ohw, hw, taps = win.oh * win.ow, win.h * win.w, win.kh * win.kw
    bias = " + in2[c]" if has_bias else ""
    source = f"""{chr(10).join(decls)}
{epi.decls}
{epi.function}
{header}  let p = idx % {ohw}u;
  let nc = idx / {ohw}u;
  let c = nc % {channels}u;
  let oh = i32(p / {win.ow}u) * {win.sh} - {win.ph};
  let ow = i32(p % {win.ow}u) * {win.sw} - {win.pw};
  var acc = 0.0;
  for (var i = 0; i < {win.kh}; i = i + 1) {{
    let ih = oh + i * {win.dh};
    if (ih < 0 || ih >= {win.h}) {{ continue; }}
    for (var j = 0; j < {win.kw}; j = j + 1) {{
      let iw = ow + j * {win.dw};
      if (iw < 0 || iw >= {win.w}) {{ continue; }}
      acc = fma(in1[c * {taps}u + u32(i * {win.kw} + j)], in0[nc * {hw}u + u32(ih) * {win.w}u + u32(iw)], acc);
    }}
  }}
  out[idx] = epilogue(acc{bias}, idx);
}}
"""
    return Launch(source, tuple(names) + (epi.output,) + epi.tensors, groups, "Conv(depthwise)")
