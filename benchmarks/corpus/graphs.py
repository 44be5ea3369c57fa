"""Control-flow corpus models: exported torch graphs wrapped with onnx.helper as streaming exporters emit them.

* ``whole_graph_in_if``: the whole model inside one ``If`` on the sample rate (as Silero VAD ships it),
  both branches full copies of the graph.
* ``loop_over_steps``: a streaming LSTM: a ``Loop`` over the frames whose body is one exported LSTM step
  (LSTM node + Linear + Sigmoid) with the states carried.
* ``scan_over_steps``: a ``Scan`` over the frames whose body is an exported ``nn.GRUCell`` (MatMul, Sigmoid,
  Tanh written out) and a Linear.
"""
from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper
from torch import nn

FRAMES, FEATURES, HIDDEN = 64, 40, 64


class StreamCell(nn.Module):
    """One streaming step: (frame (1, 1, F), h, c) -> (probability, h, c)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(FEATURES, HIDDEN, batch_first=True)
        self.out = nn.Linear(HIDDEN, 8)

    def forward(self, x, h, c):
        y, (h, c) = self.lstm(x, (h, c))
        return torch.sigmoid(self.out(y)), h, c


class GRUCell(nn.Module):
    """One Scan step: (h (1, H), frame (1, F)) -> (h, logits)."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(FEATURES, HIDDEN)
        self.out = nn.Linear(HIDDEN, 8)

    def forward(self, h, x):
        h = self.cell(x, h)
        return h, self.out(h)


def stream_inputs() -> dict:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((1, 1, FEATURES), dtype=np.float32),
            "h": np.zeros((1, 1, HIDDEN), np.float32), "c": np.zeros((1, 1, HIDDEN), np.float32)}


def scan_inputs() -> dict:
    rng = np.random.default_rng(0)
    return {"h": np.zeros((1, HIDDEN), np.float32), "x": rng.standard_normal((1, FEATURES), dtype=np.float32)}


def _body(graph: onnx.GraphProto, inputs: dict[str, str], outputs: list[tuple[str, str]], prefix: str,
          new_inputs: list, extra_nodes: list) -> onnx.GraphProto:
    """``graph`` as a body: its inputs renamed by ``inputs`` (old -> new), every other tensor prefixed (names
    stay unique across scopes), outputs [(old, new)] through Identity nodes, ``extra_nodes`` first."""
    rename = dict(inputs)

    def name(n: str) -> str:
        if not n:
            return n
        return rename.setdefault(n, prefix + n)

    nodes = list(extra_nodes)
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = prefix + node.name
        copy.input[:] = [name(n) for n in node.input]
        copy.output[:] = [name(n) for n in node.output]
        nodes.append(copy)
    inits = []
    for t in graph.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = name(t.name)
        inits.append(copy)
    outs = []
    for old, new in outputs:
        nodes.append(helper.make_node("Identity", [name(old)], [new], name=prefix + "out_" + new))
        vi = next(o for o in graph.output if o.name == old)
        copy = onnx.ValueInfoProto()
        copy.CopyFrom(vi)
        copy.name = new
        outs.append(copy)
    return helper.make_graph(nodes, prefix + "body", new_inputs, outs, inits)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def whole_graph_in_if(model: onnx.ModelProto) -> onnx.ModelProto:
    g = model.graph
    ins = {i.name: i.name for i in g.input}
    outs = [o.name for o in g.output]
    branches = [_body(g, ins, [(o, f"{tag}_{o}") for o in outs], f"{tag}/", [], []) for tag in ("then", "else")]
    cond = helper.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="is16k")
    node = helper.make_node("If", ["is16k"], outs, name="by_rate", then_branch=branches[0], else_branch=branches[1])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    const = helper.make_tensor("sr16k", TensorProto.INT64, [], [16000])
    return _model(helper.make_graph([cond, node], "vad_if", list(g.input) + [sr], list(g.output), [const]))


def loop_over_steps(model: onnx.ModelProto) -> onnx.ModelProto:
    g = model.graph
    f32 = TensorProto.FLOAT
    body_in = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
               helper.make_tensor_value_info("go", TensorProto.BOOL, []),
               helper.make_tensor_value_info("h_in", f32, [1, 1, HIDDEN]),
               helper.make_tensor_value_info("c_in", f32, [1, 1, HIDDEN])]
    gather = helper.make_node("Gather", ["frames", "i"], ["frame"], name="frame_i", axis=0)
    keep = helper.make_node("Identity", ["go"], ["go_out"], name="keep_going")
    body = _body(g, {"x": "frame", "h": "h_in", "c": "c_in"}, [("hn", "h_out"), ("cn", "c_out"), ("y", "y_out")],
                 "step/", body_in, [gather, keep])
    body.output.insert(0, helper.make_tensor_value_info("go_out", TensorProto.BOOL, []))
    loop = helper.make_node("Loop", ["trips", "", "h0", "c0"], ["hn", "cn", "y"], name="stream", body=body)
    shape = helper.make_node("Shape", ["frames"], ["frames_shape"], name="shape", end=1)
    squeeze = helper.make_node("Squeeze", ["frames_shape", "zero"], ["trips"], name="trips")
    inputs = [helper.make_tensor_value_info("frames", f32, [FRAMES, 1, 1, FEATURES]),
              helper.make_tensor_value_info("h0", f32, [1, 1, HIDDEN]),
              helper.make_tensor_value_info("c0", f32, [1, 1, HIDDEN])]
    outputs = [helper.make_tensor_value_info("y", f32, [FRAMES, 1, 1, 8]),
               helper.make_tensor_value_info("hn", f32, [1, 1, HIDDEN]),
               helper.make_tensor_value_info("cn", f32, [1, 1, HIDDEN])]
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    return _model(helper.make_graph([shape, squeeze, loop], "stream_loop_lstm", inputs, outputs, [zero]))


def scan_over_steps(model: onnx.ModelProto) -> onnx.ModelProto:
    g = model.graph
    f32 = TensorProto.FLOAT
    body_in = [helper.make_tensor_value_info("h_in", f32, [1, HIDDEN]),
               helper.make_tensor_value_info("x_t", f32, [1, FEATURES])]
    body = _body(g, {"h": "h_in", "x": "x_t"}, [("hn", "h_out"), ("y", "y_out")], "step/", body_in, [])
    scan = helper.make_node("Scan", ["h0", "xs"], ["hn", "y"], name="scan", body=body, num_scan_inputs=1)
    inputs = [helper.make_tensor_value_info("h0", f32, [1, HIDDEN]),
              helper.make_tensor_value_info("xs", f32, [FRAMES, 1, FEATURES])]
    outputs = [helper.make_tensor_value_info("hn", f32, [1, HIDDEN]),
               helper.make_tensor_value_info("y", f32, [FRAMES, 1, 8])]
    return _model(helper.make_graph([scan], "scan_gru", inputs, outputs))


def loop_feeds() -> dict:
    rng = np.random.default_rng(0)
    return {"frames": rng.standard_normal((FRAMES, 1, 1, FEATURES), dtype=np.float32),
            "h0": np.zeros((1, 1, HIDDEN), np.float32), "c0": np.zeros((1, 1, HIDDEN), np.float32)}


def scan_feeds() -> dict:
    rng = np.random.default_rng(0)
    return {"h0": np.zeros((1, HIDDEN), np.float32),
            "xs": rng.standard_normal((FRAMES, 1, FEATURES), dtype=np.float32)}
