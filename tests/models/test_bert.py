"""A BERT-style encoder (torch.onnx opset-17 op pattern) against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal.models.bert import bert_inputs, build_bert


@pytest.mark.parametrize("batch,seq", [(1, 32), (3, 16)])
def test_bert_encoder_matches_onnxruntime(batch, seq):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
    model = build_bert(layers=2, hidden=64, heads=4, seq=None, vocab=500, seed=3)
    feeds = bert_inputs(batch, seq, vocab=500, seed=4)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with nnhal.Session(model) as s:
        got = s.run(feeds)
        ops = {d.op_type for d in s.placement.values()}
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)
    # the shape subgraph (Shape -> Gather -> Unsqueeze -> Concat) was folded at prerun
    assert "Shape" not in ops and "Concat" not in ops
