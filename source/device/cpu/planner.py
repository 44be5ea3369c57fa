"""The CPU memory planner: one arena, buffers reused once their last reader has run.

Intermediate tensors with static shapes live in a single byte arena. Walking
the nodes in execution order, each new buffer takes the best-fitting free
block (or grows the arena) and is freed after its last reader. A kernel may
declare an output *in place* of an input that dies at that node (same size
and dtype), or a *view* of an input (Reshape and friends); both share the
input's buffer, whose lifetime then covers every alias. A Concat's inputs
may live inside its output's buffer (``slices``): a contiguous block, or a
channel slice of a channels-last output, whose views then have the output's
strides (``strided``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ALIGN = 64


@dataclass
class TensorPlan:
    """Where one tensor lives: arena offset, alias root, lifetime."""

    name: str
    nbytes: int
    root: str                 # the tensor owning the buffer (itself unless aliased)
    offset: int = -1          # arena offset of the root's buffer; -1 = not in the arena


@dataclass
class MemoryPlan:
    arena_bytes: int
    tensors: dict[str, TensorPlan]
    inplace: dict[str, str] = field(default_factory=dict)   # output -> input it overwrites
    views: dict[str, str] = field(default_factory=dict)     # output -> input it views
    naive_bytes: int = 0                                     # without reuse, for reports
    strides: dict[str, tuple[int, ...]] = field(default_factory=dict)  # byte strides of non-contiguous slices


def plan_memory(steps: list[tuple[list[str], list[str], dict[int, int], dict[int, int]]],
                sizes: dict[str, int], external: set[str],
                slices: dict[str, tuple[str, int]] | None = None,
                strided: dict[str, tuple[int, ...]] | None = None) -> MemoryPlan:
    """Plan buffers for ``steps`` = [(input names, output names, inplace, view)].

    ``sizes`` gives the byte size of each plannable tensor (static, produced
    here, not external); ``external`` names tensors that must outlive the run
    (outputs) or come from outside (inputs, constants). ``slices`` maps a
    tensor to (parent tensor, byte offset): it lives inside its parent's
    buffer (a Concat input written straight into the Concat output); the
    parent's buffer is taken when the first member of its group is produced
    and lives until the last member is read. ``strided`` gives the byte strides of the slices that are
    not one contiguous block (a channel slice of a channels-last Concat output: its parent's strides);
    ``sizes`` of such a slice is its element count times the item size, as for any tensor.
    """
    slices = slices or {}
    last_use: dict[str, int] = {}
    for i, (ins, outs, _, _) in enumerate(steps):
        for name in ins:
            if name:
                last_use[name] = i

    def top_of(name: str) -> tuple[str, int]:
        off = 0
        while name in slices:
            name, o = slices[name]
            off += o
        return name, off

    sub_offset: dict[str, int] = {}
    slice_top: dict[str, str] = {}
    for name in slices:
        slice_top[name], sub_offset[name] = top_of(name)
    tops = set(slice_top.values())
    root: dict[str, str] = {}
    group_last: dict[str, int] = {}
    inplace: dict[str, str] = {}
    views: dict[str, str] = {}
    for i, (ins, outs, inplace_map, view_map) in enumerate(steps):
        for o_idx, name in enumerate(outs):
            if not name:
                continue
            if name in slice_top or name in tops:
                r = slice_top.get(name, name)
                root[name] = r
                group_last[r] = max(group_last.get(r, i), last_use.get(name, i), i)
                continue
            src = ins[view_map[o_idx]] if o_idx in view_map and view_map[o_idx] < len(ins) else ""
            if src and src in root:
                # a view (static or not) keeps its source's buffer alive as long as it is read
                r = root[src]
                root[name] = r
                group_last[r] = max(group_last[r], last_use.get(name, i), i)
                views[name] = src
                continue
            if src or name not in sizes:
                # NOTE: a view of a tensor the arena does not hold (a graph input, a constant, a kernel's own
                # array) gets no buffer either: the view is of memory no step writes, and a buffer would only be
                # a per-run copy of it (a Loop body's Gather of its frame, every iteration)
                continue
            root[name] = name
            group_last[name] = max(last_use.get(name, i), i)
            src = ins[inplace_map[o_idx]] if o_idx in inplace_map and inplace_map[o_idx] < len(ins) else ""
            # never in place over a member of a slice group (its buffer is a part of the group's); over the
            # group's own tensor (a Concat output) only when the whole group dies here (ShuffleNet's Relu
            # after its Concat)
            # nor over a view of a part of its root (a Gather's block, kernels/view.py): the output would sit at
            # the root's offset, not at the part's
            if src and src in root and (root[src] not in tops or root[src] == src) and group_last[root[src]] == i \
                    and sizes.get(src) == sizes[name] and sum(1 for n in ins if n == src) == 1 \
                    and (src not in views or sizes.get(root[src]) == sizes[name]):
                r = root[src]
                root[name] = r
                group_last[r] = max(group_last[r], group_last.pop(name))
                inplace[name] = src
    # linear scan over roots
    free: list[tuple[int, int]] = []  # (offset, size)
    top = 0
    offsets: dict[str, int] = {}
    dying: dict[int, list[str]] = {}
    for r, last in group_last.items():
        dying.setdefault(last, []).append(r)
    naive = 0
    for i, (_, outs, _, _) in enumerate(steps):
        for name in outs:
            r = root.get(name) if name else None
            if r is not None and r not in offsets and r in sizes:
                size = _aligned(sizes[r])
                naive += size
                offsets[r], top = _take(free, size, top)
        for r in dying.get(i, ()):
            if r in offsets:
                _give(free, offsets[r], _aligned(sizes[r]))
    plans = {name: TensorPlan(name, sizes.get(name, 0), r, offsets[r] + sub_offset.get(name, 0))
             for name, r in root.items() if r in offsets}
    return MemoryPlan(top, plans, inplace, views, naive,
                      {name: st for name, st in (strided or {}).items() if name in plans})


def _aligned(n: int) -> int:
    return max(ALIGN, (n + ALIGN - 1) // ALIGN * ALIGN)


def _take(free: list[tuple[int, int]], size: int, top: int) -> tuple[int, int]:
    best = -1
    for j, (off, sz) in enumerate(free):
        if sz >= size and (best < 0 or sz < free[best][1]):
            best = j
    if best >= 0:
        off, sz = free.pop(best)
        if sz > size:
            free.append((off + size, sz - size))
        return off, top
    # grow: reuse a free block touching the top if there is one
    for j, (off, sz) in enumerate(free):
        if off + sz == top:
            free.pop(j)
            return off, off + size
    return top, top + size


def _give(free: list[tuple[int, int]], offset: int, size: int) -> None:
    free.append((offset, size))
    free.sort()
    merged: list[tuple[int, int]] = []
    for off, sz in free:
        if merged and merged[-1][0] + merged[-1][1] == off:
            merged[-1] = (merged[-1][0], merged[-1][1] + sz)
        else:
            merged.append((off, sz))
    free[:] = merged


def arena_views(plan: MemoryPlan, arena: np.ndarray, shapes: dict[str, tuple],
                dtypes: dict[str, np.dtype]) -> dict[str, np.ndarray]:
    """Array views into the arena for every planned tensor that owns or reuses a buffer."""
    result = {}
    for name, tp in plan.tensors.items():
        if name in plan.views:
            continue
        strides = plan.strides.get(name)
        if strides is not None:
            result[name] = np.ndarray(shapes[name], dtypes[name], buffer=arena, offset=tp.offset, strides=strides)
            continue
        count = int(np.prod(shapes[name], dtype=np.int64))
        result[name] = np.frombuffer(arena, dtype=dtypes[name], count=count, offset=tp.offset).reshape(shapes[name])
    return result
