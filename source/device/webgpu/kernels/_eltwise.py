"""Elementwise groups compiled into one WGSL function: a run of unary/binary/affine nodes becomes
one expression per output element, read from broadcast inputs. Used standalone (one launch per group)
and as the epilogue of the GEMM-like kernels."""
from __future__ import annotations

import re
from typing import Callable

from nnhal.device.webgpu.kernels._wgsl import broadcast_index, coords, decl, grid
from nnhal.device.webgpu.kernels.base import Emitter, Epilogue, Launch
from nnhal.graph.node import Node

# NOTE: WGSL has no erf; Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7) in f32. tanh clamps its
# argument first: some drivers compute tanh through exp and return nan for large |x|.
PRELUDE = """fn nn_erf(x: f32) -> f32 {
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let p = ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592;
  let y = 1.0 - p * t * exp(-a * a);
  return select(-y, y, x >= 0.0);
}
fn nn_tanh(x: f32) -> f32 { return tanh(clamp(x, -15.0, 15.0)); }
"""

# op -> (node, argument expressions, emitter) -> WGSL expression; filled by the op files via table.py
Expr = Callable[[Node, list[str], Emitter], str]


def externals(nodes: list[Node]) -> list[str]:
    """Tensors the group reads that it does not compute, in first-use order."""
    made = {o for n in nodes for o in n.outputs if o}
    seen: list[str] = []
    for n in nodes:
        for name in n.inputs:
            if name and name not in made and name not in seen:
                seen.append(name)
    return seen


def _body(nodes: list[Node], exprs: dict[str, Expr], em: Emitter, out_shape: tuple[int, ...],
          loads: dict[str, str], result: str) -> list[str]:
    lines = coords(out_shape, "idx") if any(re.search(r"\bc\d", v) for v in loads.values()) else []
    env: dict[str, str] = {}
    for j, (name, load) in enumerate(loads.items()):
        lines.append(f"let x{j} = {load};")
        env[name] = f"x{j}"
    for i, n in enumerate(nodes):
        args = [env[a] if a else "" for a in n.inputs]
        lines.append(f"let t{i} = {exprs[n.op_type](n, args, em)};")
        env[n.outputs[0]] = f"t{i}"
    lines.append(f"return {env[result]};")
    return lines


# op -> (node, input index, emitter) -> the shape an input broadcasts as, when not numpy's rule
LoadShape = Callable[[Node, int, Emitter], "tuple[int, ...] | None"]
LOAD_SHAPES: dict[str, LoadShape] = {}


def _load_shape(nodes: list[Node], name: str, em: Emitter) -> tuple[int, ...]:
    for n in nodes:
        if name in n.inputs and n.op_type in LOAD_SHAPES:
            shape = LOAD_SHAPES[n.op_type](n, n.inputs.index(name), em)
            if shape is not None:
                return shape
    return em.shape(name)


def _loads(nodes: list[Node], names: list[str], em: Emitter, out_shape: tuple[int, ...], first: int) -> dict[str, str]:
    return {name: f"e{first + j}[{broadcast_index(_load_shape(nodes, name, em), out_shape)}]"
            for j, name in enumerate(names)}


def epilogue(nodes: list[Node], exprs: dict[str, Expr], em: Emitter, replace: str, first: int) -> Epilogue:
    """The group as ``fn epilogue(v, idx)``: ``replace`` (the producer's result) is ``v``."""
    out = nodes[-1].outputs[0]
    shape = em.shape(out)
    names = [n for n in externals(nodes) if n != replace]
    loads = _loads(nodes, names, em, shape, first)
    loads[replace] = "v"
    decls = "\n".join(decl(first + j, f"e{first + j}", em.elem(n), False) for j, n in enumerate(names))
    body = _body(nodes, exprs, em, shape, loads, out)
    fn = PRELUDE + f"fn epilogue(v: f32, idx: u32) -> {em.elem(out)} {{\n  " + "\n  ".join(body) + "\n}\n"
    return Epilogue(decls, fn, tuple(names), out)


def identity_epilogue(em: Emitter, output: str) -> Epilogue:
    return Epilogue("", "fn epilogue(v: f32, idx: u32) -> f32 { return v; }\n", (), output)


def lower_group(nodes: list[Node], exprs: dict[str, Expr], em: Emitter) -> None:
    """One launch computing the group's output element by element."""
    out = nodes[-1].outputs[0]
    shape = em.shape(out)
    names = externals(nodes)
    loads = _loads(nodes, names, em, shape, 0)
    decls = [decl(j, f"e{j}", em.elem(n), False) for j, n in enumerate(names)]
    decls.append(decl(len(names), "out", em.elem(out), True))
    total = 1
    for d in shape:
        total *= int(d)
    header, groups = grid(total)
    body = _body(nodes, exprs, em, shape, loads, out)
    source = ("\n".join(decls) + "\n" + PRELUDE
              + f"fn value(idx: u32) -> {em.elem(out)} {{\n  " + "\n  ".join(body) + "\n}\n"
              + header + "  out[idx] = value(idx);\n}\n")
    em.launch(Launch(source, tuple(names) + (out,), groups, "+".join(n.op_type for n in nodes)))
