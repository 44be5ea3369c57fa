"""An activation after a pure permutation of elements runs before it (hoist_activations), where the producer
of the permuted tensor can apply it in its epilogue.

A super-resolution net (ESPCN) ends in Conv -> DepthToSpace (PixelShuffle) -> Clip(0, 1): the Clip read the
DepthToSpace's NCHW output on the reference kernel (2.3% of espcn_superres's run) after the layout pass had
let the DepthToSpace write NCHW straight from the convolution's NHWC output. An element-wise function of one
tensor commutes with a permutation of its elements, so Conv -> Clip -> DepthToSpace computes the same values;
then fusions.fuse_activations folds the Clip into the convolution and nothing is left but the one native
pass of the DepthToSpace. Bit-equal: the same function of the same values.
"""
from __future__ import annotations

from dataclasses import replace

from nnhal.device.cpu.fusions import Chosen, _activation, _readers
from nnhal.device.cpu.kernels import select
from nnhal.errors import NnhalError
from nnhal.operator.base import Info

# ops whose output is their input's elements permuted (no element dropped, repeated or computed)
PERMUTATIONS = frozenset({"DepthToSpace", "SpaceToDepth"})


def hoist_activations(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each DepthToSpace / SpaceToDepth read only by an activation that fusions.fuse_activations folds (Relu,
    Clip with constant bounds, ...) whose input comes from a kernel that applies activations in place
    (``fuse_activation``) and is read by nothing else: the activation moves before it, on the permutation's
    input (a new tensor ``<activation>/hoisted``), and the permutation writes the activation's output. The
    intermediates must not leave the subgraph; a kernel that cannot be chosen leaves the pair as it was."""
    reads, reader, producer = _readers(chosen)
    moved: dict[int, tuple[Chosen, Chosen] | None] = {}     # None: the activation's old place
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if node.op_type not in PERMUTATIONS or node.domain or len(node.outputs) != 1 or not ins or ins[0] is None:
            continue
        x, y = node.inputs[0], node.outputs[0]
        if x in external or y in external or reads[x] != 1 or reads[y] != 1 or x not in producer:
            continue
        if not getattr(chosen[producer[x]].kernel, "fuse_activation", False):
            continue
        a_pos = reader[y]
        a_node, _, a_ins, a_outs = chosen[a_pos]
        if a_pos in moved or pos in moved or not a_node.inputs or a_node.inputs[0] != y \
                or list(a_node.all_inputs).count(y) != 1 or outs[0].dtype is None \
                or _activation(a_node, a_ins, outs[0].dtype) is None:
            continue
        hoisted = f"{a_node.name}/hoisted"
        act = replace(a_node, inputs=[x] + list(a_node.inputs[1:]), outputs=[hoisted])
        act_ins = [ins[0]] + list(a_ins[1:])
        act_outs = [Info(ins[0].dtype, ins[0].shape)]
        perm = replace(node, inputs=[hoisted] + list(node.inputs[1:]), outputs=list(a_node.outputs))
        perm_ins = [act_outs[0]] + list(ins[1:])
        try:
            moved[pos] = (Chosen(act, select(act, act_ins, act_outs), act_ins, act_outs),
                          Chosen(perm, select(perm, perm_ins, list(a_outs)), perm_ins, list(a_outs)))
        except NnhalError:
            continue
        moved[a_pos] = None
    result = []
    for pos, entry in enumerate(chosen):
        if pos not in moved:
            result.append(entry)
        elif moved[pos] is not None:
            result.extend(moved[pos])
    return result
