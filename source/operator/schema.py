"""What the ONNX schemas say about a node's inputs: which are required, which element types each takes.

The prototypes own shape inference; these checks run before it, from the ONNX
operator schemas of the installed onnx, so that a model feeding a string
tensor to AveragePool or leaving a required input empty is refused with a
typed error naming node, op and opset instead of failing inside a kernel.
Ops without an ONNX schema (contrib domains) are left to their prototypes.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnx

from nnhal.errors import ModelError, UnsupportedTypeError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info

_Variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
_Single = onnx.defs.OpSchema.FormalParameterOption.Single

# numpy dtype -> the ONNX schema's type string
TYPE_STRINGS: dict[np.dtype, str] = {
    np.dtype(np.float32): "tensor(float)", np.dtype(np.float64): "tensor(double)",
    np.dtype(np.float16): "tensor(float16)", np.dtype(np.int8): "tensor(int8)",
    np.dtype(np.int16): "tensor(int16)", np.dtype(np.int32): "tensor(int32)", np.dtype(np.int64): "tensor(int64)",
    np.dtype(np.uint8): "tensor(uint8)", np.dtype(np.uint16): "tensor(uint16)",
    np.dtype(np.uint32): "tensor(uint32)", np.dtype(np.uint64): "tensor(uint64)",
    np.dtype(np.bool_): "tensor(bool)", np.dtype(object): "tensor(string)",
}


@lru_cache(maxsize=4096)
def _schema(op_type: str, opset: int, domain: str):
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


def _formal(schema, i: int):
    params = schema.inputs
    if i < len(params):
        return params[i]
    if params and params[-1].option == _Variadic:
        return params[-1]
    return None


def check_required_inputs(node: Node) -> None:
    """ModelError when an input the schema requires is empty or missing."""
    schema = _schema(node.op_type, node.opset or 1, node.domain)
    if schema is None:
        return
    for i, param in enumerate(schema.inputs):
        if param.option != _Single:
            continue
        if i >= len(node.inputs) or not node.inputs[i]:
            raise ModelError(f"{where(node)}: input {i} ('{param.name}') is required but not given")


def check_input_types(node: Node, ins: list[Info | None]) -> None:
    """UnsupportedTypeError when a known input dtype is not one the op's schema allows, or two inputs
    sharing a homogeneous type parameter differ."""
    schema = _schema(node.op_type, node.opset or 1, node.domain)
    if schema is None:
        return
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    bound: dict[str, tuple[str, int]] = {}
    for i, info in enumerate(ins[:len(node.inputs)]):
        param = _formal(schema, i)
        if info is None or info.dtype is None or param is None:
            continue
        given = TYPE_STRINGS.get(np.dtype(info.dtype))
        types = allowed.get(param.type_str, {param.type_str})
        if given is None or given not in types:
            raise UnsupportedTypeError(
                f"{where(node)}: input {i} ('{param.name}') has element type {np.dtype(info.dtype)}; the operator "
                f"takes {', '.join(sorted(t[7:-1] for t in types if t.startswith('tensor(')))}")
        if param.type_str in allowed and param.is_homogeneous:
            first = bound.setdefault(param.type_str, (given, i))
            if first[0] != given:
                raise UnsupportedTypeError(
                    f"{where(node)}: inputs {first[1]} and {i} share type {param.type_str} but have element types "
                    f"{first[0][7:-1]} and {given[7:-1]}")
