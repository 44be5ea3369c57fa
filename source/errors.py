"""The one exception hierarchy of nnhal.

Every error a user can cause is a subclass of :class:`NnhalError`. Messages
name the node, op, opset and device involved (see :func:`where`) and say what
the user can do about it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from nnhal.graph.node import Node


class NnhalError(Exception):
    """Root of every error nnhal raises on purpose."""


class ModelError(NnhalError):
    """The model is malformed or cannot be imported."""


class UnsupportedError(ModelError):
    """The model is valid ONNX but uses something nnhal does not support."""


class UnsupportedTypeError(UnsupportedError):
    """An element type (bfloat16, float8, ...) or value kind (sequence, optional) nnhal does not run."""


class UnsupportedOperatorError(UnsupportedError):
    """One or more operators have no prototype (or no device can run them)."""

    def __init__(self, message: str, entries: list[tuple[str, int, str]] | None = None):
        super().__init__(message)
        self.entries = entries or []


class InputError(NnhalError):
    """A graph input is unknown, or has the wrong shape or dtype."""


class StateError(NnhalError):
    """An API call made in the wrong order (run before prerun, use after destroy)."""


class DeviceError(NnhalError):
    """A device failed, or a device name or option is wrong."""


class ClusterError(NnhalError):
    """A Ray cluster cannot be reached or refuses this process (address, token authentication, version skew)."""


class RegistryError(NnhalError):
    """Device registration or registry regeneration failed."""


class OptionsError(NnhalError, ValueError):
    """An option value is out of range or of the wrong type."""


class LimitError(ModelError):
    """The model exceeds a bound on prepare (folded tensor, loop trips, allocation budget) or
    prepare ran out of memory; the message names the node, op, size and the option to raise."""


class InternalError(NnhalError):
    """An unexpected failure inside nnhal (a gap in its own checks, a bug): the public API's last
    safety net raises it naming the stage, chained to the original exception. Please report it."""


class ShapeError(ModelError):
    """Shape or dtype inference found inputs an operator cannot take."""


def did_you_mean(name: object, known) -> str:
    """"; did you mean 'x'?" naming the closest of ``known`` to ``name``, or "" when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), sorted(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def where(node: "Node", device: str | None = None) -> str:
    """Describe a node for an error message: name, op, domain, opset and device."""
    op = node.op_type if not node.domain else f"{node.domain}::{node.op_type}"
    text = f"node '{node.name}' ({op}, opset {node.opset})"
    if device:
        text += f" on device '{device}'"
    return text


class wrapped:
    """Context manager for the one idiom of typed errors: an :class:`NnhalError` (and any exception of
    ``passthrough``) leaves unchanged; a MemoryError becomes ``memory(exc)`` when ``memory`` is given;
    any other exception becomes ``wrap(exc)``, chained to the original.

        with wrapped(lambda exc: DeviceError(f"device 'x': split_graph failed: {exc}")):
            subgraphs = device.optimizer.split_graph(graph, placement)
    """

    __slots__ = ("wrap", "memory", "passthrough")

    def __init__(self, wrap: Callable[[Exception], NnhalError],
                 memory: Callable[[MemoryError], NnhalError] | None = None,
                 passthrough: tuple[type[BaseException], ...] = ()):
        self.wrap = wrap
        self.memory = memory
        self.passthrough = (NnhalError, *passthrough)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None or isinstance(exc, self.passthrough) or not isinstance(exc, Exception):
            return False
        if isinstance(exc, MemoryError) and self.memory is not None:
            raise self.memory(exc) from exc
        raise self.wrap(exc) from exc
