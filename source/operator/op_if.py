"""If: run then_branch or else_branch depending on a boolean condition."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import body_attr, implicit_infos, infer_body, merge_info, require_dtypes, without_value
from nnhal.operator.base import REQUIRED, Info, Prototype


class If(Prototype):
    op_type = "If"
    versions = (1, 11, 13, 16, 19, 21, 23, 24, 25)
    attributes = {"then_branch": REQUIRED, "else_branch": REQUIRED}
    inputs = (1, 1)
    outputs = (1, -1)

    def check(self, node: Node) -> None:
        for name in ("then_branch", "else_branch"):
            body = body_attr(node, name)
            if body.inputs:
                raise ModelError(f"{where(node)}: {name} must take no inputs, it takes {body.inputs}")
            if len(body.outputs) != len(node.outputs):
                raise ModelError(f"{where(node)}: {name} has {len(body.outputs)} outputs; "
                                 f"the node has {len(node.outputs)}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        cond = ins[0]
        if cond.dtype is not None and cond.dtype.kind != "b":
            raise self.fail(node, f"cond must be bool, got {cond.dtype}")
        outer = implicit_infos(node, ins)
        if cond.value is not None:
            if cond.value.size != 1:
                raise self.fail(node, f"cond must hold one element, got shape {cond.value.shape}")
            taken = "then_branch" if bool(cond.value.reshape(())) else "else_branch"
            outs = infer_body(node.attrs[taken], [], outer)
            if any(o.value is None for o in outs):
                outs = [without_value(o) for o in outs]
            return require_dtypes(node, outs)
        then = infer_body(node.attrs["then_branch"], [], outer)
        other = infer_body(node.attrs["else_branch"], [], outer)
        # NOTE: the branches may give different shapes; dims where they differ become None.
        return require_dtypes(node, [without_value(merge_info(a, b)) for a, b in zip(then, other)])
