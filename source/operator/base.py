"""The operator prototype contract: parameters, validation, shape and dtype inference.

One operator per file (``op_<snake_name>.py``), one :class:`Prototype`
subclass per file, named like the op. ``versions`` lists the opset versions in
which the operator changed; a node gets the highest one not above its model's
opset (``node.version``), so versions live side by side in one class.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nnhal.errors import ModelError, ShapeError, where
from nnhal.graph.node import Node


class Required:
    """Marker default for an attribute the model must give."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = Required()


@dataclass(frozen=True)
class Info:
    """What inference knows about a tensor: dtype, shape (dims may be None), value if constant."""

    dtype: np.dtype | None
    shape: tuple | None
    value: np.ndarray | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def static(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    @staticmethod
    def of(value: np.ndarray) -> "Info":
        value = np.asarray(value)
        return Info(value.dtype, tuple(value.shape), value)


class Prototype:
    """Base of every operator prototype.

    Subclasses set ``op_type``, ``versions``, ``attributes`` (name -> default,
    or REQUIRED), the input/output arity, and implement :meth:`infer`.
    """

    op_type: ClassVar[str]
    domain: ClassVar[str] = ""
    versions: ClassVar[tuple[int, ...]] = (1,)
    attributes: ClassVar[dict[str, Any]] = {}
    inputs: ClassVar[tuple[int, int]] = (1, 1)    # (min, max); max -1 = variadic
    outputs: ClassVar[tuple[int, int]] = (1, 1)

    # ----------------------------------------------------------------- import
    def version_for(self, opset: int) -> int | None:
        """The operator version an opset selects, or None if the op does not exist yet."""
        chosen = None
        for v in self.versions:
            if v <= opset:
                chosen = v
        return chosen

    def attributes_for(self, version: int) -> dict[str, Any]:
        """Attribute defaults for one version; override when they differ by version."""
        return self.attributes

    def normalize(self, node: Node) -> None:
        """Fill defaults and check arity and required attributes (at create_graph)."""
        defaults = self.attributes_for(node.version)
        for name, default in defaults.items():
            if name not in node.attrs:
                if default is REQUIRED:
                    raise ModelError(f"{where(node)} is missing required attribute '{name}'")
                node.attrs[name] = default
            else:
                _check_kind(node, name, default)
        lo, hi = self.inputs
        given = len(node.inputs)
        while given and not node.inputs[given - 1]:
            given -= 1
        # NOTE: trailing empty names are absent optional inputs; dropped so every stage sees the same arity
        del node.inputs[given:]
        if given < lo or (hi >= 0 and given > hi):
            raise ModelError(f"{where(node)} has {given} inputs; the operator takes {_arity(lo, hi)}")
        lo, hi = self.outputs
        if len(node.outputs) < lo or (hi >= 0 and len(node.outputs) > hi):
            raise ModelError(f"{where(node)} has {len(node.outputs)} outputs; the operator takes {_arity(lo, hi)}")
        self.check(node)

    def check(self, node: Node) -> None:
        """Extra attribute validation; raise ModelError. Override when needed."""

    # -------------------------------------------------------------- inference
    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        """Infer dtype and shape of every output from the inputs (None = absent input)."""
        raise NotImplementedError(f"{type(self).__name__}.infer")

    def fail(self, node: Node, message: str) -> ShapeError:
        """A ShapeError naming the node; ``raise self.fail(node, '...')``."""
        return ShapeError(f"{where(node)}: {message}")


# NOTE: the importer checks attribute types against the ONNX schemas; this catches what no ONNX
# schema covers (contrib-domain ops, attributes of another opset version) from the defaults' types.
_KINDS: tuple[tuple[type, tuple[type, ...], str], ...] = (
    (bool, (int,), "an int"), (int, (int,), "an int"), (float, (int, float), "a float"),
    (str, (str,), "a string"), (list, (list,), "a list"), (tuple, (list, tuple), "a list"),
)


def _check_kind(node: Node, name: str, default: Any) -> None:
    """ModelError when a given attribute's kind differs from its default's (int, float, string, list)."""
    value = node.attrs[name]
    for kind, accepted, label in _KINDS:
        if isinstance(default, kind):
            if not isinstance(value, accepted):
                raise ModelError(f"{where(node)}: attribute '{name}' must be {label}, got {type(value).__name__}")
            if kind is float:
                node.attrs[name] = float(value)
            return


def _arity(lo: int, hi: int) -> str:
    if hi < 0:
        return f"at least {lo}"
    return str(lo) if lo == hi else f"{lo} to {hi}"


# ------------------------------------------------------------- inference aids
def broadcast(node: Node, *shapes: tuple | None) -> tuple | None:
    """Multidirectional (numpy) broadcasting of shapes; None if any is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[int | None] = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            raise ShapeError(f"{where(node)}: shapes {list(shapes)} do not broadcast")
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def normalize_axis(node: Node, axis: int, rank: int | None) -> int:
    """Map a possibly negative axis into [0, rank); ShapeError when out of range."""
    if rank is None:
        return axis
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{where(node)}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def expect_shape(node: Node, info: Info | None, want: tuple | None, what: str) -> None:
    """ShapeError unless ``info``'s shape can be ``want`` (rank equal, known dims equal; None = unknown)."""
    if info is None or info.shape is None or want is None:
        return
    if len(info.shape) != len(want) or any(a is not None and b is not None and a != b
                                           for a, b in zip(info.shape, want)):
        shown = tuple("?" if d is None else d for d in want)
        raise ShapeError(f"{where(node)}: {what} has shape {info.shape}; expected {shown}")


def same_as(info: Info | None) -> Info:
    """An output with the dtype and shape of ``info`` (no value)."""
    if info is None:
        return Info(None, None)
    return Info(info.dtype, info.shape)


# NOTE: a control-flow body is a graph, and inferring a graph (nnhal.optimizer.infer: the prototypes plus
# constant folding on the host kernels) sits above the prototypes. It plugs itself in here when it is
# imported, so neither the prototypes nor the host kernels import the optimizer: no package cycle.
_graph_inference: Callable[[Any], None] | None = None


def use_graph_inference(infer: Callable[[Any], None]) -> None:
    """Install the whole-graph inference that bodies of If/Loop/Scan are inferred with."""
    global _graph_inference
    _graph_inference = infer


def infer_body_graph(graph: Any) -> None:
    """Infer (and fold) a body graph in place with the installed graph inference."""
    if _graph_inference is None:
        raise ShapeError("no graph inference is installed to infer a control-flow body (import nnhal.optimizer.infer)")
    _graph_inference(graph)
