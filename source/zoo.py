"""The light model-zoo graphs that the onnx wheel ships, and seeded random weights.

``zoo:<name>`` resolves to onnx/backend/test/data/light/light_<name>.onnx.
Their weights are ConstantOfShape nodes filling one value;
``zoo:<name>?weights=random`` replaces them with seeded random initializers
(He-scaled for Conv and Gemm weights, sane BatchNormalization statistics).
"""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import onnx
from onnx import helper, numpy_helper

from nnhal.errors import ModelError

ALIASES = {"alexnet": "bvlc_alexnet", "zfnet": "zfnet512"}


def zoo_dir() -> Path:
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"


def zoo_names() -> list[str]:
    return sorted(p.stem[len("light_"):] for p in zoo_dir().glob("light_*.onnx"))


def zoo_path(name: str) -> Path:
    name = ALIASES.get(name, name)
    path = zoo_dir() / f"light_{name}.onnx"
    if not path.is_file():
        raise ModelError(f"no zoo model '{name}'; the onnx wheel ships: {', '.join(zoo_names())}")
    return path


def reference_output(name: str) -> np.ndarray:
    """The output shipped beside a zoo model (computed with its constant weights)."""
    name = ALIASES.get(name, name)
    t = onnx.TensorProto()
    t.ParseFromString((zoo_dir() / f"light_{name}_output_0.pb").read_bytes())
    return numpy_helper.to_array(t)


def resolve(spec: str) -> onnx.ModelProto | str:
    """A model path, or a ModelProto for 'zoo:<name>[?weights=random&seed=N]'."""
    if not spec.startswith("zoo:"):
        return spec
    name, _, query = spec[4:].partition("?")
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = set(params) - {"weights", "seed"}
    if unknown:
        raise ModelError(f"zoo model '{spec}': unknown parameter(s) {sorted(unknown)}; use weights=random and seed=N")
    model = onnx.load(str(zoo_path(name)))
    weights = params.get("weights", "shipped")
    if weights == "random":
        return randomize_weights(model, int(params.get("seed", 0)))
    if weights != "shipped":
        raise ModelError(f"zoo model '{spec}': weights must be 'random' or 'shipped', got '{weights}'")
    return model


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace ConstantOfShape weights (and random-able initializers) by seeded random ones."""
    rng = np.random.default_rng(seed)
    graph = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    role = _roles(graph)
    new_nodes, new_inits = [], []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in inits[node.input[0]])
            name = node.output[0]
            new_inits.append(numpy_helper.from_array(_sample(rng, role.get(name, ("", 0)), shape), name))
            continue
        new_nodes.append(node)
    used = {i for n in new_nodes for i in n.input}
    keep = []
    for init in graph.initializer:
        if init.name not in used:
            continue
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and init.name in role:
            arr = _sample(rng, role[init.name], arr.shape)
        keep.append(numpy_helper.from_array(arr, init.name))
    kept_names = {i.name for i in keep} | {i.name for i in new_inits}
    original_inits = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in kept_names and i.name not in original_inits]
    new_graph = helper.make_graph(new_nodes, graph.name, inputs, list(graph.output), keep + new_inits)
    out = helper.make_model(new_graph, opset_imports=list(model.opset_import), producer_name="nnhal-zoo")
    out.ir_version = max(model.ir_version, 4)
    return out


def _roles(graph: onnx.GraphProto) -> dict[str, tuple[str, int]]:
    """Tensor name -> (consumer op, input index), following Unsqueeze to its consumer."""
    role: dict[str, tuple[str, int]] = {}
    alias: dict[str, str] = {}
    for node in graph.node:
        if node.op_type in ("Unsqueeze", "Reshape") and node.input:
            alias[node.output[0]] = node.input[0]
    for node in graph.node:
        for idx, name in enumerate(node.input):
            base = name
            while base in alias:
                base = alias[base]
            role.setdefault(base, (node.op_type, idx))
    return role


def _sample(rng: np.random.Generator, role: tuple[str, int], shape: tuple[int, ...]) -> np.ndarray:
    op, idx = role
    if op == "Conv" and idx == 1 or op == "Gemm" and idx == 1:
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else int(shape[1] if len(shape) > 1 else shape[0])
        return (rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))).astype(np.float32)
    if op == "BatchNormalization":
        if idx == 1:   # scale
            return rng.uniform(0.8, 1.2, shape).astype(np.float32)
        if idx == 4:   # variance
            return rng.uniform(0.5, 1.5, shape).astype(np.float32)
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)
    if op == "Mul":
        return rng.uniform(0.8, 1.2, shape).astype(np.float32)
    return (rng.standard_normal(shape) * 0.05).astype(np.float32)


def input_for(model: onnx.ModelProto, seed: int = 0, batch: int | None = None) -> dict[str, np.ndarray]:
    """Seeded random inputs for a model's (non-initializer) inputs; dynamic dims become 1 (or batch)."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        if batch is not None and dims:
            dims[0] = batch
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
        else:
            feeds[vi.name] = rng.integers(0, 2, dims).astype(dtype)
    return feeds
