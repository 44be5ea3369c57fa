"""Attention's head split and merge Transposes read and written by the MatMuls as strided views (CPU plan).

torch.onnx's attention splits heads with ``Transpose(Reshape(x, (B, S, H, D)), (0, 2, 1, 3))`` before the
score and value products, transposes k with perm (0, 1, 3, 2) or (0, 2, 3, 1), and merges heads after the
value product with ``Transpose(p, (0, 2, 1, 3))`` (or (2, 0, 1, 3) from nn.MultiheadAttention). Each is a
copy (the native ``swap`` kernel) of a tensor that only the MatMul reads, or only the MatMul writes.

``fold_transposes`` drops such a Transpose: the MatMul reads the Transpose's input through a transposed view
(``x.transpose(perm)``, no copy), or writes its product through the inverse view of the Transpose's output
buffer. The views are ones BLAS reads and writes in place: each matrix keeps a unit stride along one of its
last two axes (an operand) or along its last axis (the product), its rows a leading dimension apart (H * D
for a head split). The stacked products then run as before (parallel.matmul: the native pool's batched GEMM,
whose operands carry their own batch stride, row stride and transpose flag), and the sums are the same sums
in BLAS's order.

Only the fast MatMul kernel (not under NNHAL_CPU_REFERENCE=1, where no fusion runs), float32, static shapes,
with no fused activation (an activation applies in place on a contiguous product); a Transpose that is a
reshape (kernels/transpose.py ``reshape``: a view already) is left alone.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

import numpy as np

from nnhal.device.cpu.fusions import Chosen, _readers
from nnhal.device.cpu.kernels.matmul import MatMulFast
from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import FusedNode, activation_of, epilogue_of
from nnhal.operator.base import Info
from nnhal.operator.op_transpose import permutation

_F32 = np.dtype(np.float32)
View = Callable[[np.ndarray], np.ndarray]      # an operand as the MatMul reads it, from the array it is given


class MatMulViews(Kernel):
    """A MatMul kernel run on views: input k is ``views[k](inputs[k])`` (the folded Transposes' input seen as
    their output, or a row gather's data seen as the gather reshaped), and with ``out_perm`` the product is
    written through ``outputs[0].transpose(inverse of out_perm)`` (the folded Transpose's output buffer).
    ``inner`` gets the node and the infos the MatMul had before the fold, so it prepares exactly as it would
    have."""

    op_type = "MatMul"

    def __init__(self, inner: Kernel, views: dict[int, View], ins: list[Info | None],
                 out_perm: tuple[int, ...] | None, outs: list[Info]):
        self.inner, self.views, self.inner_ins = inner, dict(views), list(ins)
        self.out_perm, self.inner_outs = out_perm, list(outs)
        self.name = f"{inner.name}, views"

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        """The inner kernel's run function prepared for the pre-fold infos, its operands and product mapped
        through the views."""
        run = self.inner.prepare(node, self.inner_ins, self.inner_outs)
        views = tuple(self.views.items())
        if self.out_perm is None:
            def run_views(inputs, outputs):
                inputs = list(inputs)
                for k, view in views:
                    inputs[k] = view(inputs[k])
                return run(inputs, outputs)

            return run_views
        perm = self.out_perm
        inverse = tuple(int(i) for i in np.argsort(perm))
        shape, dtype = tuple(outs[0].shape), outs[0].dtype

        def run_merged(inputs, outputs):
            inputs = list(inputs)
            for k, operand_view in views:
                inputs[k] = operand_view(inputs[k])
            out = outputs[0] if outputs[0] is not None else np.empty(shape, dtype)
            view = out.transpose(inverse)
            y = run(inputs, [view])[0]
            if y is not view:
                np.copyto(view, y)
            return (out,)

        return run_merged


def _chain(chosen: list[Chosen], j: int, producer: dict[str, int], external: set[str]) \
        -> tuple[View, list[int]] | None:
    """(view, positions) of the Transpose at ``j`` composed with the Transposes before it that feed it
    (a head split then a k transpose: one view of the head split's input), when the composed perm is one
    BLAS reads in place (the input's last axis lands on one of the output's last two); positions from ``j``
    back to the chain's first Transpose."""
    perm = _perm(chosen[j])
    if perm is None or len(perm) < 2:
        return None
    links = [j]
    while True:
        src = chosen[links[-1]].node.inputs[0]
        i = producer.get(src)
        before = _perm(chosen[i]) if i is not None and src not in external else None
        if before is None:
            break
        perm = tuple(before[p] for p in perm)
        links.append(i)
    if len(perm) - 1 not in perm[-2:]:
        return None
    return (lambda x: x.transpose(perm)), links


def _operand(chosen: list[Chosen], j: int, producer: dict[str, int], external: set[str], reads,
             group_axis: int | None = None) -> tuple[View, list[int]] | None:
    """(view, positions) of the operand produced at ``j``: a chain of Transposes (_chain), possibly of a row
    gather's Reshape read by nothing else (_rows: the view is then the transposed strided one), or that
    Reshape alone. ``group_axis`` goes to _rows."""
    found = _chain(chosen, j, producer, external)
    if found is None:
        return _rows(chosen, j, producer, external, reads, group_axis)
    transpose, links = found
    src = chosen[links[-1]].node.inputs[0]
    r = producer.get(src)
    rows = _rows(chosen, r, producer, external, reads, group_axis) if r is not None and src not in external \
        and reads[src] == 1 else None
    if rows is None:
        return found
    strided, more = rows
    return (lambda x: transpose(strided(x))), links + more


def _rows(chosen: list[Chosen], j: int, producer: dict[str, int], external: set[str], reads,
          group_axis: int | None = None) -> tuple[View, list[int]] | None:
    """(view, positions) of a Reshape view at ``j`` of a Gather of constant rows (axis 0) of a matrix (R, C),
    the sole reader of the gather (optimizer/movement.py's collapsed head split: q, k or v of a fused
    projection, rows t * 3H + h), when the rows, laid out as the Reshape's leading axes, are an affine grid
    with non-negative steps: the result is then the matrix seen with strides (no copy), its last axis the
    rows' C elements; positions: the Reshape, the Gather. With ``group_axis``, rows repeated in runs of g along
    that axis of the Reshape (grouped-query attention's repeated key/value heads) are read once: the view has
    1/g of that axis (its reader maps index i to i // g)."""
    node, kernel, ins, outs = chosen[j]
    if node.op_type != "Reshape" or kernel.name != "view" or outs[0].dtype != _F32 or not _static(outs[0]):
        return None
    data = node.inputs[0]
    g = producer.get(data)
    if g is None or data in external or reads[data] != 1:
        return None
    gnode, gkernel, gins, _ = chosen[g]
    if gnode.op_type != "Gather" or gnode.domain or gkernel.name != "constant-indices" \
            or gnode.attrs.get("axis", 0) != 0 or len(gins) != 2 or gins[1] is None or gins[1].value is None \
            or not _static(gins[0]) or len(gins[0].shape) != 2 or gins[0].dtype != _F32:
        return None
    rows, c = gins[0].shape
    shape = tuple(outs[0].shape)
    idx = np.asarray(gins[1].value).astype(np.int64).reshape(-1)
    if len(shape) < 2 or shape[-1] != c or idx.size != int(np.prod(shape[:-1])) or idx.size == 0 \
            or idx.min() < -rows or idx.max() >= rows:
        return None
    grid = np.where(idx < 0, idx + rows, idx).reshape(shape[:-1])
    if group_axis is not None and group_axis < grid.ndim:
        grid, shape = _ungrouped(grid, shape, group_axis)
    base = int(grid.flat[0])
    steps = [int(grid[(0,) * d + (1,) + (0,) * (grid.ndim - d - 1)]) - base if shape[d] > 1 else 0
             for d in range(grid.ndim)]
    if any(st < 0 for st in steps) or (shape[-2] > 1 and steps[-1] < 1):
        return None
    if not np.array_equal(grid, base + sum(np.indices(grid.shape)[d] * steps[d] for d in range(grid.ndim))):
        return None
    strides = tuple(st * c * 4 for st in steps) + (4,)
    start = base * c

    def view(x: np.ndarray) -> np.ndarray:
        if x.shape == (rows, c) and x.flags.c_contiguous:
            # NOTE: the ndarray constructor over x's buffer (bounds checked against it): as_strided took 4.8 us a
            # call against 0.6, twice per attention product (loaded 2-core Zen 3)
            v = np.ndarray(shape, x.dtype, x, start * x.itemsize, strides)
            v.flags.writeable = False
            return v
        return np.take(x, grid.reshape(-1), axis=0).reshape(shape)      # the gather's own copy

    return view, [j, g]


def _ungrouped(grid: np.ndarray, shape: tuple, axis: int) -> tuple[np.ndarray, tuple]:
    """(grid, shape) with runs of g equal index slices along ``axis`` kept once (g the first run's length when
    every run has it and g > 1), else as given."""
    n = grid.shape[axis]
    first = np.moveaxis(grid, axis, 0)
    g = 1
    while g < n and np.array_equal(first[g], first[0]):
        g += 1
    if g == 1 or n % g:
        return grid, shape
    kept = first[::g]
    if not np.array_equal(np.repeat(kept, g, axis=0), first):
        return grid, shape
    return np.moveaxis(kept, 0, axis), shape[:axis] + (n // g,) + shape[axis + 1:]


def _product_perm(entry: Chosen) -> tuple[int, ...] | None:
    """The perm of a Transpose whose input a MatMul can write through a view of its output: the last axis
    stays last (the product's rows stay rows, a leading dimension apart)."""
    perm = _perm(entry)
    return perm if perm is not None and perm[-1] == len(perm) - 1 else None


def _perm(entry: Chosen) -> tuple[int, ...] | None:
    node, kernel, ins, outs = entry
    if node.op_type != "Transpose" or node.domain or kernel.name == "reshape" or len(node.inputs) != 1 \
            or len(node.outputs) != 1 or not node.outputs[0] or not ins or ins[0] is None \
            or ins[0].dtype != _F32 or not _static(ins[0]) or not _static(outs[0]):
        return None
    try:
        return tuple(permutation(node, len(ins[0].shape)))
    except ValueError:
        return None


def _static(info: Info | None) -> bool:
    return info is not None and info.shape is not None and all(isinstance(d, int) for d in info.shape)


def _foldable(entry: Chosen) -> bool:
    node, kernel, ins, outs = entry
    return node.op_type == "MatMul" and not node.domain and isinstance(kernel, MatMulFast) \
        and activation_of(node) is None and len(node.outputs) == 1 and bool(node.outputs[0]) \
        and outs[0].dtype == _F32 and _static(outs[0])


def fold_transposes(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Every fast float32 MatMul reads its operands 0 and 1 through the Transposes that feed only MatMuls
    (as those operands), and writes its product through a Transpose that is its product's only reader,
    when the views are BLAS's (see the module); the folded Transposes are dropped."""
    chosen = list(chosen)
    reads, reader, producer = _readers(chosen)
    readers: dict[str, list[int]] = {}
    for pos, entry in enumerate(chosen):
        for name in entry.node.all_inputs:
            if name:
                readers.setdefault(name, []).append(pos)
    dropped: set[int] = set()
    folded: set[int] = set()            # Transposes read through views, dropped once nothing else reads them
    for pos, entry in enumerate(chosen):
        if not _foldable(entry):
            continue
        node, kernel, ins, outs = entry
        views: dict[int, View] = {}
        inputs, new_ins, absorbed = list(node.inputs), list(ins), []
        for k in (0, 1):
            name = node.inputs[k] if k < len(node.inputs) else ""
            j = producer.get(name)
            if not name or name in external or j is None or j in dropped:
                continue
            # a Transpose whose input's MatMul now writes its output (dropped) ends a chain: its input is gone
            found = _operand(chosen, j, producer, external | {chosen[d].node.outputs[0] for d in dropped}, reads)
            # every reader a foldable MatMul taking it as operand 0 or 1 only (those readers fold it too)
            if found is None or not all(_foldable(chosen[r]) and name not in chosen[r].node.inputs[2:]
                                        for r in readers.get(name, ())):
                continue
            views[k], links = found
            first = chosen[links[-1]]
            inputs[k], new_ins[k] = first.node.inputs[0], first.ins[0]
            absorbed += [chosen[i].node.name for i in links]
            folded.update(links)
        out_perm, outputs, new_outs = None, list(node.outputs), list(outs)
        y = node.outputs[0]
        j = reader.get(y)
        if y not in external and reads[y] == 1 and j is not None and j not in dropped:
            out_perm = _product_perm(chosen[j])
            if out_perm is not None:
                outputs, new_outs = list(chosen[j].node.outputs), list(chosen[j].outs)
                absorbed.append(chosen[j].node.name)
                dropped.add(j)
        if not absorbed:
            continue
        base = {**{f.name: getattr(node, f.name) for f in fields(Node)}, "inputs": inputs, "outputs": outputs}
        fused = FusedNode(**base, epilogue=epilogue_of(node), absorbed=getattr(node, "absorbed", ()) + tuple(absorbed))
        chosen[pos] = Chosen(fused, MatMulViews(kernel, views, ins, out_perm, outs), new_ins, new_outs)
    for j in sorted(folded, reverse=True):       # a chain's last Transpose first: it may read the one before
        still_read = {n for pos, e in enumerate(chosen) if pos not in dropped for n in e.node.all_inputs if n}
        if chosen[j].node.outputs[0] not in still_read:
            dropped.add(j)
    return [entry for pos, entry in enumerate(chosen) if pos not in dropped]
