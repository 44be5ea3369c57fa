"""A BERT-style encoder built with onnx.helper, op for op as torch.onnx exports it at opset 17.

Embeddings (Gather word + position + token type, LayerNormalization), then
per layer: Q/K/V MatMul+Add, head split through Shape -> Gather ->
Unsqueeze -> Concat -> Reshape, Transpose, scaled MatMul, Softmax with an
additive mask built by Cast/Sub/Mul from the attention mask, output
projection, residual Add + LayerNormalization, Gelu as Erf, Div, Add, Mul,
and the final pooler (Gather CLS, Gemm, Tanh). Weights are seeded random.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"/{base}_{self.count}"

    def const(self, value, base: str = "c") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, shape, scale: float = 0.02, base: str = "w") -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), base)

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x: str, d_in: int, d_out: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight((d_in, d_out))]), self.weight((d_out,), 0.01)])

    def layer_norm(self, x: str, d: int) -> str:
        gamma = self.const((1 + self.rng.standard_normal(d) * 0.05).astype(np.float32), "gamma")
        return self.op("LayerNormalization", [x, gamma, self.weight((d,), 0.02)], axis=-1, epsilon=1e-12)

    def dim(self, x: str, index: int) -> str:
        """torch.onnx's size(): Shape -> Gather(scalar index)."""
        return self.op("Gather", [self.op("Shape", [x]), self.const(np.array(index, np.int64))], axis=0)

    def unsq(self, x: str) -> str:
        return self.op("Unsqueeze", [x, self.const(np.array([0], np.int64))])

    def gelu(self, x: str) -> str:
        inner = self.op("Erf", [self.op("Div", [x, self.const(np.array(1.4142135381698608, np.float32))])])
        half = self.op("Mul", [x, self.op("Add", [inner, self.const(np.array(1.0, np.float32))])])
        return self.op("Mul", [half, self.const(np.array(0.5, np.float32))])


def build_bert(layers: int = 6, hidden: int = 384, heads: int = 12, seq: int | None = 128, vocab: int = 30522,
               intermediate: int | None = None, max_position: int = 512, seed: int = 0) -> onnx.ModelProto:
    """The encoder as an ONNX model with inputs input_ids, attention_mask, token_type_ids (int64 [batch, seq])."""
    b = _Builder(seed)
    inter = intermediate or 4 * hidden
    head_dim = hidden // heads
    ids, mask, types = "input_ids", "attention_mask", "token_type_ids"
    seq_len = b.dim(ids, 1)
    positions = b.unsq(b.op("Range", [b.const(np.array(0, np.int64)), seq_len, b.const(np.array(1, np.int64))]))
    emb = b.op("Add", [b.op("Gather", [b.weight((vocab, hidden)), ids]),
                       b.op("Gather", [b.weight((2, hidden)), types])])
    emb = b.op("Add", [emb, b.op("Gather", [b.weight((max_position, hidden)), positions])])
    x = b.layer_norm(emb, hidden)
    # additive mask: (1 - mask) * -10000, as [batch, 1, 1, seq]
    m = b.op("Unsqueeze", [b.op("Unsqueeze", [mask, b.const(np.array([1], np.int64))]), b.const(np.array([2], np.int64))])
    m = b.op("Cast", [m], to=TensorProto.FLOAT)
    m = b.op("Mul", [b.op("Sub", [b.const(np.array(1.0, np.float32)), m]), b.const(np.array(-10000.0, np.float32))])
    scale = b.const(np.array(np.sqrt(head_dim), np.float32))
    for _ in range(layers):
        batch = b.unsq(b.dim(x, 0))
        length = b.unsq(b.dim(x, 1))
        split_shape = b.op("Concat", [batch, length, b.const(np.array([heads], np.int64)),
                                      b.const(np.array([head_dim], np.int64))], axis=0)

        def heads_of(t: str, perm: list[int]) -> str:
            return b.op("Transpose", [b.op("Reshape", [t, split_shape])], perm=perm)

        q = heads_of(b.linear(x, hidden, hidden), [0, 2, 1, 3])
        k = heads_of(b.linear(x, hidden, hidden), [0, 2, 3, 1])
        v = heads_of(b.linear(x, hidden, hidden), [0, 2, 1, 3])
        scores = b.op("Add", [b.op("Div", [b.op("MatMul", [q, k]), scale]), m])
        probs = b.op("Softmax", [scores], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        merge_shape = b.op("Concat", [batch, length, b.const(np.array([hidden], np.int64))], axis=0)
        ctx = b.op("Reshape", [ctx, merge_shape])
        x = b.layer_norm(b.op("Add", [b.linear(ctx, hidden, hidden), x]), hidden)
        ff = b.linear(b.gelu(b.linear(x, hidden, inter)), inter, hidden)
        x = b.layer_norm(b.op("Add", [ff, x]), hidden)
    cls = b.op("Gather", [x, b.const(np.array(0, np.int64))], axis=1)
    pooled = b.op("Tanh", [b.op("Gemm", [cls, b.weight((hidden, hidden)), b.weight((hidden,), 0.01)], transB=1)])
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/out0"))
    b.nodes.append(helper.make_node("Identity", [pooled], ["pooler_output"], name="/out1"))
    dims = ["batch", seq if seq is not None else "sequence"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, dims) for n in (ids, mask, types)]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [hidden]),
               helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden])]
    graph = helper.make_graph(b.nodes, "bert_encoder", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="nnhal-bert")
    model.ir_version = 8
    return model


def bert_inputs(batch: int, seq: int, vocab: int = 30522, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded token ids, a mask with some padding, and two segments."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    for row in range(batch):
        mask[row, seq - row * seq // (2 * max(batch, 1)):] = 0
    types = np.zeros((batch, seq), np.int64)
    types[:, seq // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
