"""Mutations of a serialized ONNX model, driven by a seeded random.Random (deterministic).

Each mutation damages one thing a hostile or broken exporter could: an attribute's value or type,
an element type, a shape, an initializer's data, a node's inputs or outputs, the op type or opset,
or the bytes themselves. A mutation that finds nothing to change in a model changes something else.
"""
from __future__ import annotations

import random
from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

ELEM_TYPES = list(range(0, 27)) + [999, -1, 2 ** 31 - 1]
INTS = [0, 1, -1, 2, 3, 7, -2, 64, 2 ** 31 - 1, -2 ** 31, 2 ** 40, -2 ** 62, 2 ** 63 - 1]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, float("nan"), float("inf"), float("-inf"), 3.0e38]
STRINGS = [b"", b"NOTSET", b"SAME_UPPER", b"VALID", b"linear", b"xyz\xff", b"\x00", b"A" * 200]
ATTR_NAMES = ["axis", "axes", "perm", "to", "kernel_shape", "pads", "strides", "dilations", "group", "value",
              "keepdims", "mode", "alpha", "beta", "transA", "transB", "k", "largest", "split", "body",
              "then_branch", "else_branch", "direction", "hidden_size", "auto_pad", "epsilon", "blocksize"]
OPS = ["Add", "Relu", "Conv", "Gemm", "MatMul", "Reshape", "Transpose", "Concat", "Gather", "Slice", "Loop",
       "If", "Scan", "Cast", "Softmax", "Split", "Resize", "Pad", "TopK", "LSTM", "QuantizeLinear",
       "DequantizeLinear", "ConstantOfShape", "Expand", "Tile", "Einsum", "NoSuchOp", "Identity", "Unique"]


def graphs(g: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The graph and every nested body, depth first."""
    out = [g]
    for node in g.node:
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                out.extend(graphs(a.g))
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    out.extend(graphs(sub))
    return out


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in graphs(model.graph) for n in g.node]


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [v for g in graphs(model.graph) for v in (*g.input, *g.output, *g.value_info)]


def _initializers(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    inits = [t for g in graphs(model.graph) for t in g.initializer]
    inits += [a.t for n in _nodes(model) for a in n.attribute if a.type == AttributeProto.TENSOR]
    return inits


def _random_tensor(rng: random.Random) -> TensorProto:
    kind = rng.choice(["int64", "float", "empty", "big", "type", "2d"])
    if kind == "int64":
        n = rng.randint(0, 3)
        return helper.make_tensor("t", TensorProto.INT64, [n], [rng.choice(INTS[:8]) for _ in range(n)])
    if kind == "float":
        return helper.make_tensor("t", TensorProto.FLOAT, [1], [rng.choice(FLOATS)])
    if kind == "empty":
        return helper.make_tensor("t", TensorProto.FLOAT, [0], [])
    if kind == "big":
        return helper.make_tensor("t", TensorProto.INT64, [3], [rng.choice(INTS) for _ in range(3)])
    if kind == "2d":
        return helper.make_tensor("t", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    t = helper.make_tensor("t", TensorProto.FLOAT, [1], [1.0])
    t.data_type = rng.choice(ELEM_TYPES)
    return t


def _fill(a: AttributeProto, rng: random.Random, old_length: int = 0) -> None:
    """A fresh random value of the attribute's type (list lengths around ``old_length``)."""
    kind = a.type
    if kind == AttributeProto.INT:
        a.i = rng.choice(INTS)
    elif kind == AttributeProto.FLOAT:
        a.f = rng.choice(FLOATS)
    elif kind == AttributeProto.STRING:
        a.s = rng.choice(STRINGS)
    elif kind == AttributeProto.INTS:
        a.ints.extend(rng.choice(INTS) for _ in range(rng.choice([0, 1, old_length, old_length + 1, 8])))
    elif kind == AttributeProto.FLOATS:
        a.floats.extend(rng.choice(FLOATS) for _ in range(rng.choice([0, 1, old_length + 1])))
    elif kind == AttributeProto.STRINGS:
        a.strings.extend(rng.choice(STRINGS) for _ in range(rng.randint(0, 3)))
    elif kind == AttributeProto.TENSOR:
        a.t.CopyFrom(_random_tensor(rng))
    elif kind == AttributeProto.TENSORS:
        a.tensors.extend(_random_tensor(rng) for _ in range(rng.randint(0, 2)))
    elif kind == AttributeProto.GRAPH:
        a.g.CopyFrom(helper.make_graph([helper.make_node("Identity", ["gi"], ["go"])], "sub",
                                       [helper.make_tensor_value_info("gi", TensorProto.FLOAT, [1])],
                                       [helper.make_tensor_value_info("go", TensorProto.FLOAT, [1])]))
    elif kind == AttributeProto.TYPE_PROTO:
        a.tp.tensor_type.elem_type = rng.choice(ELEM_TYPES)


def _set_attr_value(a: AttributeProto, rng: random.Random) -> None:
    """A new value of the attribute's own type; a body graph loses or gains an input, output or node."""
    if a.type == AttributeProto.GRAPH:
        body = a.g
        choice = rng.randint(0, 3)
        if choice == 0 and body.output:
            del body.output[-1]
        elif choice == 1 and body.input:
            del body.input[-1]
        elif choice == 2 and body.node:
            del body.node[rng.randrange(len(body.node))]
        else:
            body.output.add().name = "nowhere"
        return
    name, kind, length = a.name, a.type, max(len(a.ints), len(a.floats))
    a.Clear()
    a.name, a.type = name, kind
    _fill(a, rng, length)


def _retype_attr(a: AttributeProto, rng: random.Random) -> None:
    """The same name with a value of another attribute type."""
    name = a.name
    a.Clear()
    a.name = name
    a.type = rng.choice([AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING, AttributeProto.INTS,
                         AttributeProto.FLOATS, AttributeProto.STRINGS, AttributeProto.TENSOR, AttributeProto.GRAPH,
                         AttributeProto.TENSORS, AttributeProto.UNDEFINED, AttributeProto.SPARSE_TENSOR,
                         AttributeProto.TYPE_PROTO])
    _fill(a, rng)


def m_attr_value(model: onnx.ModelProto, rng: random.Random) -> str:
    attrs = [(n, a) for n in _nodes(model) for a in n.attribute]
    if not attrs:
        return m_attr_add(model, rng)
    node, a = rng.choice(attrs)
    _set_attr_value(a, rng)
    return f"attr value {node.op_type}.{a.name}"


def m_attr_type(model: onnx.ModelProto, rng: random.Random) -> str:
    attrs = [(n, a) for n in _nodes(model) for a in n.attribute]
    if not attrs:
        return m_attr_add(model, rng)
    node, a = rng.choice(attrs)
    _retype_attr(a, rng)
    return f"attr type {node.op_type}.{a.name} -> {a.type}"


def m_attr_add(model: onnx.ModelProto, rng: random.Random) -> str:
    nodes = _nodes(model)
    node = rng.choice(nodes)
    present = {a.name for a in node.attribute}
    name = rng.choice([n for n in ATTR_NAMES if n not in present] or ATTR_NAMES)
    a = node.attribute.add()
    a.name = name
    _retype_attr(a, rng)
    return f"attr add {node.op_type}.{name}"


def m_attr_drop(model: onnx.ModelProto, rng: random.Random) -> str:
    nodes = [n for n in _nodes(model) if n.attribute]
    if not nodes:
        return m_attr_add(model, rng)
    node = rng.choice(nodes)
    i = rng.randrange(len(node.attribute))
    name = node.attribute[i].name
    del node.attribute[i]
    return f"attr drop {node.op_type}.{name}"


def m_elem_type(model: onnx.ModelProto, rng: random.Random) -> str:
    code = rng.choice(ELEM_TYPES)
    where = rng.choice(["value", "init", "cast"])
    casts = [a for n in _nodes(model) for a in n.attribute if a.name in ("to", "dtype", "output_dtype")]
    inits = _initializers(model)
    if where == "cast" and casts:
        rng.choice(casts).i = code
        return f"elem type of a 'to' attribute -> {code}"
    if where == "init" and inits:
        t = rng.choice(inits)
        t.data_type = code
        return f"elem type of initializer {t.name} -> {code}"
    vis = [v for v in _value_infos(model) if v.type.HasField("tensor_type")]
    if not vis:
        return m_drop_input(model, rng)
    v = rng.choice(vis)
    v.type.tensor_type.elem_type = code
    return f"elem type of {v.name} -> {code}"


def m_shape(model: onnx.ModelProto, rng: random.Random) -> str:
    inits = _initializers(model)
    if inits and rng.random() < 0.4:
        t = rng.choice(inits)
        dims = list(t.dims)
        choice = rng.randint(0, 3)
        if choice == 0 and dims:
            dims[rng.randrange(len(dims))] = rng.choice([0, 1, 2, 3, 2 ** 20, -1])
        elif choice == 1:
            dims.append(rng.choice([1, 2, 0]))
        elif choice == 2 and dims:
            dims.pop()
        else:
            dims = [rng.choice([0, 1, 5, 2 ** 31])]
        del t.dims[:]
        t.dims.extend(dims)
        return f"initializer {t.name} dims -> {dims}"
    vis = [v for v in (*model.graph.input, *model.graph.output, *model.graph.value_info)
           if v.type.HasField("tensor_type")]
    if not vis:
        return m_elem_type(model, rng)
    v = rng.choice(vis)
    shape = v.type.tensor_type.shape
    choice = rng.randint(0, 4)
    if choice == 0 and shape.dim:
        shape.dim[rng.randrange(len(shape.dim))].dim_value = rng.choice([0, 1, 2, 3, 7, 2 ** 16, -1, -5])
    elif choice == 1:
        shape.dim.add().dim_value = rng.choice([1, 2, 3])
    elif choice == 2 and shape.dim:
        del shape.dim[rng.randrange(len(shape.dim))]
    elif choice == 3 and shape.dim:
        shape.dim[rng.randrange(len(shape.dim))].dim_param = rng.choice(["N", "", "batch"])
    else:
        v.type.tensor_type.ClearField("shape")
    return f"shape of {v.name}"


def m_init_data(model: onnx.ModelProto, rng: random.Random) -> str:
    inits = [t for t in _initializers(model) if t.data_type in (TensorProto.INT64, TensorProto.INT32,
                                                               TensorProto.FLOAT)]
    if not inits:
        return m_shape(model, rng)
    t = rng.choice(inits)
    dims = list(t.dims)
    count = int(np.prod(dims)) if dims else 1
    if count > 4096:
        data = bytes(t.raw_data)[: rng.randrange(max(1, len(t.raw_data)))]
        t.raw_data = data
        return f"initializer {t.name} raw data truncated"
    name, dtype = t.name, t.data_type
    if dtype == TensorProto.FLOAT:
        values = [rng.choice(FLOATS) for _ in range(count)]
    else:
        values = [rng.choice(INTS) for _ in range(count)]
        if dtype == TensorProto.INT32:
            values = [int(np.int64(v).astype(np.int32)) for v in values]
    t.CopyFrom(helper.make_tensor(name, dtype, dims, values))
    return f"initializer {name} values"


def m_drop_input(model: onnx.ModelProto, rng: random.Random) -> str:
    choice = rng.randint(0, 4)
    nodes = [n for n in _nodes(model) if n.input]
    if choice == 0 and nodes:
        node = rng.choice(nodes)
        del node.input[rng.randrange(len(node.input))]
        return f"node {node.op_type} input dropped"
    if choice == 1 and nodes:
        node = rng.choice(nodes)
        node.input[rng.randrange(len(node.input))] = rng.choice(["", "missing_tensor"])
        return f"node {node.op_type} input blanked"
    if choice == 2 and model.graph.initializer:
        del model.graph.initializer[rng.randrange(len(model.graph.initializer))]
        return "initializer dropped"
    if choice == 3 and model.graph.input:
        del model.graph.input[rng.randrange(len(model.graph.input))]
        return "graph input dropped"
    node = rng.choice(_nodes(model))
    node.input.append(rng.choice(["", "extra", node.output[0] if node.output else "x"]))
    return f"node {node.op_type} input added"


def m_outputs(model: onnx.ModelProto, rng: random.Random) -> str:
    choice = rng.randint(0, 3)
    nodes = [n for n in _nodes(model) if n.output]
    if choice == 0 and nodes:
        node = rng.choice(nodes)
        del node.output[rng.randrange(len(node.output))]
        return f"node {node.op_type} output dropped"
    if choice == 1 and len(nodes) > 1:
        a, b = rng.sample(nodes, 2)
        b.output[0] = a.output[0]
        return "two producers of one tensor"
    if choice == 2 and len(model.graph.output) > 0:
        model.graph.output[rng.randrange(len(model.graph.output))].name = rng.choice(["nowhere", ""])
        return "graph output renamed"
    node = rng.choice(_nodes(model))
    node.output.append(rng.choice(["", "extra_out", node.input[0] if node.input else "y"]))
    return f"node {node.op_type} output added"


def m_op(model: onnx.ModelProto, rng: random.Random) -> str:
    node = rng.choice(_nodes(model))
    choice = rng.randint(0, 2)
    if choice == 0:
        node.op_type = rng.choice(OPS)
        return f"op -> {node.op_type}"
    if choice == 1:
        node.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "foo", "ai.onnx"])
        return f"domain -> {node.domain}"
    node.input[:] = list(reversed(node.input))
    return f"{node.op_type} inputs reversed"


def m_opset(model: onnx.ModelProto, rng: random.Random) -> str:
    version = rng.choice([0, 1, 6, 7, 9, 11, 13, 17, 21, 25, 26, 1000, -1])
    if model.opset_import and rng.random() < 0.8:
        model.opset_import[0].version = version
    else:
        del model.opset_import[:]
    model.ir_version = rng.choice([model.ir_version, 0, 3, 99])
    return f"opset -> {version}"


def m_duplicate_node(model: onnx.ModelProto, rng: random.Random) -> str:
    g = rng.choice(graphs(model.graph))
    if not g.node:
        return m_op(model, rng)
    node = g.node[rng.randrange(len(g.node))]
    g.node.insert(rng.randrange(len(g.node) + 1), node)
    return f"node {node.op_type} duplicated"


def m_truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    cut = rng.randrange(len(data))
    return data[:cut], f"bytes truncated at {cut}/{len(data)}"


def m_garble(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    return bytes(buf), "bytes garbled"


PROTO_MUTATIONS: list[tuple[Callable[[onnx.ModelProto, random.Random], str], int]] = [
    (m_attr_value, 6), (m_attr_type, 4), (m_attr_add, 2), (m_attr_drop, 2), (m_elem_type, 4), (m_shape, 4),
    (m_init_data, 4), (m_drop_input, 3), (m_outputs, 2), (m_op, 2), (m_opset, 1), (m_duplicate_node, 1),
]
BYTE_MUTATIONS = [m_truncate, m_garble]


def mutate(data: bytes, rng: random.Random) -> tuple[onnx.ModelProto | bytes, str]:
    """A mutated copy of a serialized model and what was done to it."""
    if rng.random() < 0.1:
        return rng.choice(BYTE_MUTATIONS)(data, rng)
    model = onnx.ModelProto()
    model.ParseFromString(data)
    steps = []
    funcs, weights = zip(*PROTO_MUTATIONS)
    for _ in range(1 if rng.random() < 0.8 else 2):
        steps.append(rng.choices(funcs, weights)[0](model, rng))
    return model, "; ".join(steps)
