"""fp16 on webgpu: float tensors *stored* as f16 (half the memory and bandwidth), computed in f32.

Kernels are written once, for f32. For a subgraph at precision fp16 each launch's WGSL is rewritten:
a float binding is declared ``array<f16>``, every read ``x[i]`` becomes ``f32(x[i])`` and every
store ``x[i] = v;`` becomes ``x[i] = f16(v);``. Accumulators, workgroup tiles and reductions stay f32.
Needs the adapter feature ``shader-f16``.
"""
from __future__ import annotations

import re

from nnhal.device.webgpu.kernels.base import Launch


def _matching(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced brackets in generated WGSL")


def _rewrite_accesses(text: str, var: str) -> str:
    out, pos = [], 0
    pattern = re.compile(rf"\b{re.escape(var)}\[")
    while True:
        m = pattern.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        close = _matching(text, m.end() - 1)
        access = text[m.start():close + 1]
        rest = text[close + 1:]
        store = re.match(r"\s*=(?!=)\s*", rest)
        out.append(text[pos:m.start()])
        if store:
            end = text.index(";", close + 1 + store.end())
            value = text[close + 1 + store.end():end]
            out.append(f"{access} = f16({value});")
            pos = end + 1
        else:
            out.append(f"f32({access})")
            pos = close + 1


def to_f16_storage(launch: Launch, half: set[str]) -> Launch:
    """The launch with the bindings of tensors in ``half`` held as f16."""
    source = launch.source
    binding_var = {}
    for m in re.finditer(r"@binding\((\d+)\) var<storage, (?:read|read_write)> (\w+): array<f32>;", source):
        binding_var[int(m.group(1))] = m.group(2)
    changed = False
    for i, tensor in enumerate(launch.tensors):
        var = binding_var.get(i)
        if var is None or tensor not in half:
            continue
        source = source.replace(f"{var}: array<f32>;", f"{var}: array<f16>;")
        head, sep, body = source.partition(f"{var}: array<f16>;")
        source = head + sep + _rewrite_accesses(body, var)
        changed = True
    if not changed:
        return launch
    return Launch("enable f16;\n" + source, launch.tensors, launch.workgroups, launch.label)
