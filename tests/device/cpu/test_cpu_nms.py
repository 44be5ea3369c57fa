"""NonMaxSuppression on the CPU against onnxruntime: random boxes with ties, both box encodings, thresholds,
output limits, the sparse path, its wide-box tail and the per-box fallback."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnhal
import nnhal.hostkernels.op_non_max_suppression as nms
from tests.conftest import make_model, vinfo


def nms_model(center: int, with_score: bool):
    inputs = ["boxes", "scores", "limit", "iou"] + (["score"] if with_score else [])
    node = helper.make_node("NonMaxSuppression", inputs, ["sel"], center_point_box=center)
    graph_inputs = [vinfo("boxes", ["b", "n", 4]), vinfo("scores", ["b", "c", "n"]),
                    vinfo("limit", [1], TensorProto.INT64),
                    vinfo("iou", [1])] + ([vinfo("score", [1])] if with_score else [])
    return make_model([node], graph_inputs, [vinfo("sel", ["k", 3], TensorProto.INT64)], opset=11)


def random_case(rng, batches: int, classes: int, n: int, ties: bool, wide: bool = False):
    if wide:   # a few boxes spanning the whole image: they reach past the diagonal depth
        xy = rng.uniform(0, 100, (batches, n, 2)).astype(np.float32)
        wh = rng.uniform(1, 8, (batches, n, 2)).astype(np.float32)
        wh[:, :: max(1, n // 10), 0] = 100
    else:
        xy = rng.uniform(0, 20, (batches, n, 2)).astype(np.float32)
        wh = rng.uniform(0, 8, (batches, n, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + wh], axis=-1)
    flip = rng.random((batches, n)) < 0.2   # corners given in either order
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    boxes[:, : n // 10] = np.round(boxes[:, : n // 10])   # duplicates and touching edges
    scores = rng.random((batches, classes, n)).astype(np.float32)
    if ties:
        scores = np.round(scores * 8) / 8
    return boxes, scores


def run_both(model, feeds):
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return got, want


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("limit", [0, 1, 7, 10**9])
def test_matches_onnxruntime(center, ties, limit):
    rng = np.random.default_rng(100 * center + 10 * ties + limit % 97)
    boxes, scores = random_case(rng, 2, 3, 200, ties)
    for iou, score in ((0.5, 0.3), (0.0, 0.0), (1.0, None), (0.2, 0.95)):
        feeds = {"boxes": boxes, "scores": scores, "limit": np.array([limit], np.int64),
                 "iou": np.array([iou], np.float32)}
        if score is not None:
            feeds["score"] = np.array([score], np.float32)
        got, want = run_both(nms_model(center, score is not None), feeds)
        np.testing.assert_array_equal(got, want, err_msg=f"iou {iou} score {score}")


def test_wide_boxes_take_the_gathered_tail():
    rng = np.random.default_rng(7)
    boxes, scores = random_case(rng, 1, 2, 600, True, wide=True)
    edges = nms.corners(boxes[0], 0)
    count = np.searchsorted(np.sort(edges[1]), edges[3][np.argsort(edges[1], kind="stable")]) - np.arange(600) - 1
    assert nms._depth(np.maximum(count, 0)) < count.max()    # the tail path really runs
    feeds = {"boxes": boxes, "scores": scores, "limit": np.array([1000], np.int64),
             "iou": np.array([0.1], np.float32), "score": np.array([0.1], np.float32)}
    got, want = run_both(nms_model(0, True), feeds)
    np.testing.assert_array_equal(got, want)


def test_per_box_fallback_past_the_pair_budget(monkeypatch):
    monkeypatch.setattr(nms, "PAIR_BUDGET", 10)
    rng = np.random.default_rng(3)
    boxes, scores = random_case(rng, 1, 2, 150, True)
    edges = nms.corners(boxes[0], 0)
    area = (edges[2] - edges[0]) * (edges[3] - edges[1])
    assert nms.overlap_pairs(edges, area, np.float32(0.4)) is None
    feeds = {"boxes": boxes, "scores": scores, "limit": np.array([50], np.int64),
             "iou": np.array([0.4], np.float32), "score": np.array([0.2], np.float32)}
    got, want = run_both(nms_model(0, True), feeds)
    np.testing.assert_array_equal(got, want)


def test_small_chunks_give_the_same_pairs(monkeypatch):
    rng = np.random.default_rng(5)
    boxes, _ = random_case(rng, 1, 1, 300, False, wide=True)
    edges = nms.corners(boxes[0], 0)
    area = (edges[2] - edges[0]) * (edges[3] - edges[1])
    whole = nms.overlap_pairs(edges, area, np.float32(0.05))
    monkeypatch.setattr(nms, "PAIR_CHUNK", 7)
    chunked = nms.overlap_pairs(edges, area, np.float32(0.05))
    key = lambda p: sorted(zip(np.minimum(*p).tolist(), np.maximum(*p).tolist()))  # noqa: E731
    assert key(whole) == key(chunked) and len(key(whole)) > 0


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.int32])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_top_k_of_a_few_matches_onnxruntime(dtype, largest, axis):
    rng = np.random.default_rng(11)
    x = rng.integers(0, 6, (40, 64)).astype(dtype)    # many ties: the lower index must come first
    if dtype == np.int32:
        x = (x - 3) * 700_000_000
    k = 5
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    elem = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8,
            np.int32: TensorProto.INT32}[dtype]
    model = make_model([node], [vinfo("x", [40, 64], elem), vinfo("k", [1], TensorProto.INT64)],
                       [vinfo("v", ["a", "b"], elem), vinfo("i", ["a", "b"], TensorProto.INT64)])
    feeds = {"x": x, "k": np.array([k], np.int64)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
