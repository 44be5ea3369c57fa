"""MaxPool, AveragePool (1-D and 2-D windows) and the global pools: one invocation per output element."""
from __future__ import annotations

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels._window import window
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

OPS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


def why_not(c: Candidate) -> str | None:
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32":
        return f"{c.node.op_type} needs a float32 input of known shape"
    if c.node.op_type.startswith("Global"):
        return None if x.rank >= 3 else f"{c.node.op_type} needs an input of rank >= 3"
    if x.rank not in (3, 4):
        return f"{c.node.op_type} of rank {x.rank} (only 1-D and 2-D windows are implemented)"
    if len([o for o in c.node.outputs if o]) > 1:
        return "MaxPool's Indices output is not implemented"
    return None


def _global(node: Node, em: Emitter) -> None:
    shape = em.shape(node.inputs[0])
    nc = int(shape[0]) * int(shape[1])
    size = 1
    for d in shape[2:]:
        size *= int(d)
    maxing = node.op_type == "GlobalMaxPool"
    body = [f"let base = idx * {size}u;",
            f"var acc = {'in0[base]' if maxing else '0.0'};",
            f"for (var i = 0u; i < {size}u; i = i + 1u) {{ "
            f"acc = {'max(acc, in0[base + i])' if maxing else 'acc + in0[base + i]'}; }}",
            f"let val = {'acc' if maxing else f'acc / {float(size)}'};"]
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, node.op_type, (nc,)))


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    if node.op_type.startswith("Global"):
        _global(node, em)
        return
    x = em.shape(node.inputs[0])
    kernel = [int(k) for k in node.attrs["kernel_shape"]]
    win = window(node, x, kernel, bool(node.attrs.get("ceil_mode", 0)))
    ohw, hw = win.oh * win.ow, win.h * win.w
    maxing = node.op_type == "MaxPool"
    include_pad = bool(node.attrs.get("count_include_pad", 0))
    body = [f"let p = idx % {ohw}u;", f"let base = (idx / {ohw}u) * {hw}u;",
            f"let oh = i32(p / {win.ow}u) * {win.sh} - {win.ph};",
            f"let ow = i32(p % {win.ow}u) * {win.sw} - {win.pw};",
            f"var acc = {'bitcast<f32>(0xff800000u)' if maxing else '0.0'};",
            "var count = 0;",
            f"for (var i = 0; i < {win.kh}; i = i + 1) {{",
            f"  let ih = oh + i * {win.dh};",
            f"  for (var j = 0; j < {win.kw}; j = j + 1) {{",
            f"    let iw = ow + j * {win.dw};",
            # NOTE: count_include_pad counts the pads, not the cells a ceil_mode window hangs past them
            f"    if (ih >= -{win.ph} && ih < {win.h + win.ph_end} && iw >= -{win.pw} && iw < {win.w + win.pw_end}"
            f" && {'true' if include_pad else 'false'}) {{ count = count + 1; }}",
            f"    if (ih < 0 || ih >= {win.h} || iw < 0 || iw >= {win.w}) {{ continue; }}",
            f"    let v = in0[base + u32(ih) * {win.w}u + u32(iw)];",
            f"    {'acc = max(acc, v);' if maxing else 'acc = acc + v;'}",
            f"    {'' if include_pad else 'count = count + 1;'}",
            "  }", "}",
            f"let val = {'acc' if maxing else 'acc / f32(max(count, 1))'};"]
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, node.op_type, (int(x[0]) * int(x[1]) * ohw,)))
