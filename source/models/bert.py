"""A BERT-style encoder built with onnx.helper, op for op as torch.onnx exports it at opset 17.

Embeddings (Gather word + position + token type, LayerNormalization), then
per layer: Q/K/V MatMul+Add, head split through Shape -> Gather ->
Unsqueeze -> Concat -> Reshape, Transpose, scaled MatMul, Softmax with an
additive mask built by Cast/Sub/Mul from the attention mask, output
projection, residual Add + LayerNormalization, Gelu as Erf, Div, Add, Mul,
and the final pooler (Gather CLS, Gemm, Tanh), or mean pooling over the
mask with L2 normalisation (sentence-transformers' Pooling + Normalize).
Weights are seeded random, or a Hugging Face BertModel's state dict (its
names: ``embeddings.word_embeddings.weight``, ``encoder.layer.N.attention.
self.query.weight``, ...; Linear weights are [out, in] and are transposed for
MatMul, as torch.onnx does).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from nnhal.errors import ModelError


class _Builder:
    def __init__(self, seed: int, weights: dict[str, np.ndarray] | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.weights = weights
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

    def weight(self, shape, scale: float = 0.02, base: str = "w", key: str | None = None,
               transpose: bool = False) -> str:
        """A float32 parameter: ``weights[key]`` (transposed for a Linear's [out, in]) or seeded random."""
        if self.weights is None or key is None:
            return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), base)
        if key not in self.weights:
            raise ModelError(f"the BERT weights lack '{key}'")
        value = np.asarray(self.weights[key], np.float32)
        value = value.T if transpose else value
        if value.shape != tuple(shape):
            raise ModelError(f"BERT weight '{key}' has shape {value.shape}, expected {tuple(shape)}")
        return self.const(np.ascontiguousarray(value), base)

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x: str, d_in: int, d_out: int, key: str | None = None) -> str:
        w = self.weight((d_in, d_out), key=key and f"{key}.weight", transpose=True)
        return self.op("Add", [self.op("MatMul", [x, w]), self.weight((d_out,), 0.01, key=key and f"{key}.bias")])

    def layer_norm(self, x: str, d: int, key: str | None = None) -> str:
        if self.weights is not None and key is not None:
            gamma = self.weight((d,), key=f"{key}.weight")
        else:
            gamma = self.const((1 + self.rng.standard_normal(d) * 0.05).astype(np.float32), "gamma")
        beta = self.weight((d,), 0.02, key=key and f"{key}.bias")
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)

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
               intermediate: int | None = None, max_position: int = 512, seed: int = 0,
               weights: dict[str, np.ndarray] | None = None, pooling: str = "pooler") -> onnx.ModelProto:
    """The encoder as an ONNX model with inputs input_ids, attention_mask, token_type_ids (int64 [batch, seq]).

    weights  a Hugging Face BertModel state dict (numpy arrays); None = seeded random
    pooling  "pooler": outputs last_hidden_state and pooler_output (CLS, Gemm, Tanh);
             "mean": last_hidden_state and sentence_embedding (mean over the mask, L2-normalised)
    """
    if pooling not in ("pooler", "mean"):
        raise ModelError(f"pooling must be 'pooler' or 'mean', got {pooling!r}")
    b = _Builder(seed, weights)
    inter = intermediate or 4 * hidden
    head_dim = hidden // heads
    ids, mask, types = "input_ids", "attention_mask", "token_type_ids"
    seq_len = b.dim(ids, 1)
    positions = b.unsq(b.op("Range", [b.const(np.array(0, np.int64)), seq_len, b.const(np.array(1, np.int64))]))
    emb = b.op("Add", [b.op("Gather", [b.weight((vocab, hidden), key="embeddings.word_embeddings.weight"), ids]),
                       b.op("Gather", [b.weight((2, hidden), key="embeddings.token_type_embeddings.weight"), types])])
    emb = b.op("Add", [emb, b.op("Gather", [b.weight((max_position, hidden),
                                                      key="embeddings.position_embeddings.weight"), positions])])
    x = b.layer_norm(emb, hidden, "embeddings.LayerNorm")
    # additive mask: (1 - mask) * -10000, as [batch, 1, 1, seq]
    m = b.op("Unsqueeze", [mask, b.const(np.array([1], np.int64))])
    m = b.op("Unsqueeze", [m, b.const(np.array([2], np.int64))])
    m = b.op("Cast", [m], to=TensorProto.FLOAT)
    m = b.op("Mul", [b.op("Sub", [b.const(np.array(1.0, np.float32)), m]), b.const(np.array(-10000.0, np.float32))])
    scale = b.const(np.array(np.sqrt(head_dim), np.float32))
    for layer in range(layers):
        at = f"encoder.layer.{layer}"
        batch = b.unsq(b.dim(x, 0))
        length = b.unsq(b.dim(x, 1))
        split_shape = b.op("Concat", [batch, length, b.const(np.array([heads], np.int64)),
                                      b.const(np.array([head_dim], np.int64))], axis=0)

        def heads_of(t: str, perm: list[int]) -> str:
            return b.op("Transpose", [b.op("Reshape", [t, split_shape])], perm=perm)

        q = heads_of(b.linear(x, hidden, hidden, f"{at}.attention.self.query"), [0, 2, 1, 3])
        k = heads_of(b.linear(x, hidden, hidden, f"{at}.attention.self.key"), [0, 2, 3, 1])
        v = heads_of(b.linear(x, hidden, hidden, f"{at}.attention.self.value"), [0, 2, 1, 3])
        scores = b.op("Add", [b.op("Div", [b.op("MatMul", [q, k]), scale]), m])
        probs = b.op("Softmax", [scores], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        merge_shape = b.op("Concat", [batch, length, b.const(np.array([hidden], np.int64))], axis=0)
        ctx = b.op("Reshape", [ctx, merge_shape])
        attended = b.linear(ctx, hidden, hidden, f"{at}.attention.output.dense")
        x = b.layer_norm(b.op("Add", [attended, x]), hidden, f"{at}.attention.output.LayerNorm")
        ff = b.linear(b.gelu(b.linear(x, hidden, inter, f"{at}.intermediate.dense")), inter, hidden,
                      f"{at}.output.dense")
        x = b.layer_norm(b.op("Add", [ff, x]), hidden, f"{at}.output.LayerNorm")
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/out0"))
    dims = ["batch", seq if seq is not None else "sequence"]
    if pooling == "mean":
        pooled, second = _mean_pool(b, x, mask), "sentence_embedding"
    else:
        cls = b.op("Gather", [x, b.const(np.array(0, np.int64))], axis=1)
        pooled = b.op("Tanh", [b.op("Gemm", [cls, b.weight((hidden, hidden), key="pooler.dense.weight"),
                                             b.weight((hidden,), 0.01, key="pooler.dense.bias")], transB=1)])
        second = "pooler_output"
    b.nodes.append(helper.make_node("Identity", [pooled], [second], name="/out1"))
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, dims) for n in (ids, mask, types)]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [hidden]),
               helper.make_tensor_value_info(second, TensorProto.FLOAT, ["batch", hidden])]
    graph = helper.make_graph(b.nodes, "bert_encoder", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="nnhal-bert")
    model.ir_version = 8
    return model


def _mean_pool(b: _Builder, x: str, mask: str) -> str:
    """sentence-transformers' mean pooling over the attention mask, then x / max(||x||_2, 1e-12)."""
    m = b.op("Cast", [b.op("Unsqueeze", [mask, b.const(np.array([-1], np.int64))])], to=TensorProto.FLOAT)
    axis = b.const(np.array([1], np.int64))
    total = b.op("ReduceSum", [b.op("Mul", [x, m]), axis], keepdims=0)
    count = b.op("Clip", [b.op("ReduceSum", [m, axis], keepdims=0), b.const(np.array(1e-9, np.float32))])
    mean = b.op("Div", [total, count])
    norm = b.op("Clip", [b.op("ReduceL2", [mean], axes=[-1], keepdims=1), b.const(np.array(1e-12, np.float32))])
    return b.op("Div", [mean, norm])


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
