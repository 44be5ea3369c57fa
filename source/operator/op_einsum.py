"""Einsum: Einstein summation over a variadic list of operands."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import REQUIRED, Info, Prototype, broadcast


def parse_equation(node: Node, equation: str, n_inputs: int) -> tuple[list[str], str]:
    """Input terms and the explicit output term; '.' stands for an ellipsis."""
    eq = equation.replace(" ", "").replace("...", ".")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        raise ModelError(f"{where(node)}: equation '{equation}' has {len(terms)} operands; the node has {n_inputs}")
    for t in terms + [rhs]:
        if t.count(".") > 1 or any(not (ch.isalpha() or ch == ".") for ch in t):
            raise ModelError(f"{where(node)}: equation '{equation}' is malformed")
    if not arrow:
        letters = "".join(terms).replace(".", "")
        once = sorted(ch for ch in set(letters) if letters.count(ch) == 1)
        rhs = ("." if "." in lhs else "") + "".join(once)
    return terms, rhs


class Einsum(Prototype):
    op_type = "Einsum"
    versions = (12, 28)
    inputs = (1, -1)
    attributes = {"equation": REQUIRED}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        terms, rhs = parse_equation(node, node.attrs["equation"], len(ins))
        dtypes = {i.dtype for i in ins if i.dtype is not None}
        if len(dtypes) > 1:
            raise self.fail(node, f"operands have different dtypes {sorted(map(str, dtypes))}")
        dtype = ins[0].dtype
        if any(i.shape is None for i in ins):
            return [Info(dtype, None)]
        dims: dict[str, int | None] = {}
        ellipses = []
        for term, info in zip(terms, ins):
            named = len(term) - ("." in term)
            if named > len(info.shape) or ("." not in term and named != len(info.shape)):
                raise self.fail(node, f"term '{term}' does not match operand shape {info.shape}")
            head = term.index(".") if "." in term else len(term)
            tail = len(term) - head - 1
            ell = info.shape[head:len(info.shape) - tail] if "." in term else ()
            ellipses.append(tuple(ell))
            letters = term.replace(".", "")
            shape = info.shape[:head] + info.shape[len(info.shape) - tail:] if "." in term else info.shape
            own: dict[str, int] = {}
            for ch, d in zip(letters, shape):      # a label repeated in one term (a diagonal) takes one size
                if d is not None and own.setdefault(ch, d) != d:
                    raise self.fail(node, f"label '{ch}' repeats in term '{term}' with sizes {own[ch]} and {d}")
            for ch, d in zip(letters, shape):
                known = dims.get(ch)
                if known is None or known == 1:
                    dims[ch] = d if d is not None or ch not in dims else known
                elif d is not None and d not in (1, known):
                    raise self.fail(node, f"label '{ch}' has sizes {known} and {d}")
        ell_shape = broadcast(node, *ellipses)
        out: list = []
        for ch in rhs:
            if ch == ".":
                out.extend(ell_shape)
            elif ch not in dims:
                raise ModelError(f"{where(node)}: output label '{ch}' is not in any operand")
            else:
                out.append(dims[ch])
        return [Info(dtype, tuple(out))]
