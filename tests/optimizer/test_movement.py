"""collapse_data_movement (optimizer/movement.py): chains of pure data movement become one row gather.

Graphs before and after the pass, outputs against onnxruntime, and a small Swin block (two 4x4 windows,
a cyclic shift by torch.roll's Slice/Concat, relative position bias and the shifted-window mask) run
end to end."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound
from nnhal.graph.graph import Graph
from nnhal.hostkernels.evaluate import evaluate_node
from nnhal.optimizer.infer import infer_graph
from nnhal.optimizer.movement import _rows, collapse_data_movement
from nnhal.serializer.onnx_import import load_onnx

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")


class Builder:
    """Nodes and initializers of a test model, named in order."""

    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def const(self, value, dtype=np.int64) -> str:
        self.k += 1
        name = f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        self.k += 1
        out = f"t{self.k}_{op_type}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self.k}_{op_type}", **attrs))
        return out

    def slice(self, x: str, start: int, end: int, axis: int, step: int = 1) -> str:
        return self.op("Slice", [x, self.const([start]), self.const([end]), self.const([axis]), self.const([step])])

    def roll(self, x: str, shift: int, size: int, axis: int) -> str:
        """torch.roll along one axis as torch.onnx exports it: Concat of two Slices."""
        cut = (-shift) % size
        return self.op("Concat", [self.slice(x, cut, size, axis), self.slice(x, 0, cut, axis)], axis=axis)

    def model(self, x_shape, out: str, out_shape, x_dtype=TensorProto.FLOAT) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", x_dtype, x_shape)],
                                  [helper.make_tensor_value_info(out, x_dtype, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def _prepared(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Graph:
    """The graph after inference at the feeds' shapes and the pass."""
    graph = load_onnx(model)
    for name, value in feeds.items():
        graph.tensors[name].shape = value.shape
    infer_graph(graph)
    collapse_data_movement(graph)
    return graph


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], bound=None, **tol) -> nnhal.Session:
    """nnhal against onnxruntime: bit-equal for pure data movement (no arithmetic, so no order to differ),
    else within ``bound`` (nnhal.conformance.tolerance) or the tolerance given."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    s = nnhal.Session(model, devices=["cpu"], num_thread=1)
    got = s.run(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if bound is not None:
            assert_within_bound(g, w, bound)
        else:
            np.testing.assert_allclose(g, w, **(tol or {"rtol": 0, "atol": 0}))
    return s


def _partition(b: Builder, x: str, n: int, h: int, w: int, c: int, ws: int) -> str:
    """Windows of ws x ws tokens: (N, H, W, C) -> (N * windows, ws * ws, C)."""
    x = b.op("Reshape", [x, b.const([n, h // ws, ws, w // ws, ws, c])])
    x = b.op("Transpose", [x], perm=[0, 1, 3, 2, 4, 5])
    return b.op("Reshape", [x, b.const([n * (h // ws) * (w // ws), ws * ws, c])])


def _reverse(b: Builder, x: str, n: int, h: int, w: int, c: int, ws: int) -> str:
    x = b.op("Reshape", [x, b.const([n, h // ws, w // ws, ws, ws, c])])
    x = b.op("Transpose", [x], perm=[0, 1, 3, 2, 4, 5])
    return b.op("Reshape", [x, b.const([n, h, w, c])])


def test_roll_and_window_partition_become_one_row_gather():
    b = Builder()
    x = b.op("Pad", ["x", b.const([0, 0, 0, 0, 0, 0, 0, 0])])            # torchvision's pad to a window multiple
    x = b.roll(b.roll(x, -2, 4, 1), -2, 8, 2)
    y = _partition(b, x, 2, 4, 8, 8, 4)
    model = b.model([2, 4, 8, 8], y, [4, 16, 8])
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4, 8, 8)).astype(np.float32)}
    before = [n.op_type for n in _prepared_without_pass(model, feeds).nodes]
    assert before.count("Slice") == 4 and before.count("Concat") == 2 and "Transpose" in before
    after = _prepared(model, feeds)
    assert [n.op_type for n in after.nodes] == ["Reshape", "Gather", "Reshape"]
    # whole channel vectors move at once (two pixels a row: a shift by 2 keeps pairs together)
    rows, matrix = after.tensors[after.nodes[1].inputs[1]].value, after.tensors[after.nodes[1].inputs[0]]
    assert matrix.shape == (32, 16) and sorted(rows.tolist()) == list(range(32))
    s = _check(model, feeds)
    assert s.graph.pass_report["collapse_data_movement"] == 10


def _prepared_without_pass(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Graph:
    graph = load_onnx(model)
    for name, value in feeds.items():
        graph.tensors[name].shape = value.shape
    infer_graph(graph)
    return graph


def test_pixel_maps_equal_element_maps():
    """Regions that keep the source's last axis together are mapped on pixel indices (the last axis cut
    to 1): the rows are those of the element-index map, C the pixel C times the width."""
    from nnhal.optimizer.movement import _Region, _regions

    model = _swin_block(2)
    graph = _prepared_without_pass(model, {"x": np.zeros((2, 4, 8, 16), np.float32)})
    sinks, producer = _regions(graph)
    pixel_regions = 0
    for source, names in sinks.items():
        pixel, element = _Region(graph, source, producer, {}, names), _Region(graph, source, producer, {}, names)
        element.width, element.inputs = 1, {}
        pixel_regions += pixel.width > 1
        for sink in names:
            (c1, rows1), (c2, rows2) = pixel.rows(sink), element.rows(sink)
            assert c1 == c2 and np.array_equal(rows1, rows2), sink
    assert pixel_regions >= 2           # the partition (after the rolls) and the reverse (before the crop)


def test_copies_that_move_nothing_become_a_reshape():
    b = Builder()
    x = b.op("Pad", ["x", b.const([0, 0, 0, 0, 0, 0])])
    x = b.slice(x, 0, 5, 1)                                                # x[:, :H] with H == 5
    y = b.op("Reshape", [x, b.const([2, 20])])
    model = b.model([2, 5, 4], y, [2, 20])
    feeds = {"x": np.arange(40, dtype=np.float32).reshape(2, 5, 4)}
    assert [n.op_type for n in _prepared(model, feeds).nodes] == ["Reshape"]
    _check(model, feeds)


def test_a_chain_that_changes_nothing_disappears():
    """A Transpose and its inverse: the Relu reads the input itself (the cpu layout pass then keeps a
    channels-last region across it)."""
    b = Builder()
    x = b.op("Transpose", [b.op("Transpose", ["x"], perm=[0, 2, 3, 1])], perm=[0, 3, 1, 2])
    y = b.op("Relu", [x])
    model = b.model([1, 8, 3, 3], y, [1, 8, 3, 3])
    graph = _prepared(model, {"x": np.zeros((1, 8, 3, 3), np.float32)})
    assert [(n.op_type, n.inputs) for n in graph.nodes] == [("Relu", ["x"])]
    _check(model, {"x": np.random.default_rng(6).standard_normal((1, 8, 3, 3)).astype(np.float32)})


def test_a_single_copy_is_left_to_the_device_fusions():
    """A channel shuffle (one Transpose between reshapes) stays: the cpu folds it into the convolution."""
    b = Builder()
    x = b.op("Reshape", ["x", b.const([1, 2, 4, 3, 3])])
    x = b.op("Transpose", [x], perm=[0, 2, 1, 3, 4])
    y = b.op("Reshape", [x, b.const([1, 8, 3, 3])])
    model = b.model([1, 8, 3, 3], y, [1, 8, 3, 3])
    graph = _prepared_without_pass(model, {"x": np.zeros((1, 8, 3, 3), np.float32)})
    assert collapse_data_movement(graph) == 0
    assert [n.op_type for n in graph.nodes] == ["Reshape", "Transpose", "Reshape"]


def test_short_rows_cut_the_region_before_its_last_copy():
    """q/k split of a qkv product: K transposed at the end would be a gather of single elements, so K is
    gathered in rows of head_dim and its Transpose kept; Q and V become one gather each."""
    b = Builder()
    x = b.op("Reshape", ["x", b.const([4, 16, 3, 2, 8])])
    x = b.op("Transpose", [x], perm=[2, 0, 3, 1, 4])
    q = b.op("Gather", [x, b.const(0)], axis=0)
    k = b.op("Transpose", [b.op("Gather", [x, b.const(1)], axis=0)], perm=[0, 1, 3, 2])
    v = b.op("Gather", [x, b.const(2)], axis=0)
    y = b.op("MatMul", [b.op("MatMul", [q, k]), v])
    model = b.model([4, 16, 48], y, [4, 2, 16, 8])
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 16, 48)).astype(np.float32)}
    ops = [n.op_type for n in _prepared(model, feeds).nodes]
    assert ops.count("Gather") == 3 and ops.count("Transpose") == 1
    qkv = feeds["x"].reshape(4, 16, 3, 2, 8).transpose(2, 0, 3, 1, 4)
    # (q @ k^T) @ v summed in whatever order each engine's GEMM takes: the chain's reduction bound
    _check(model, feeds, bound=matmul_bound(qkv[0], qkv[1].transpose(0, 1, 3, 2), qkv[2]))


def test_an_intermediate_read_elsewhere_stays_available():
    b = Builder()
    t = b.op("Transpose", ["x"], perm=[0, 2, 1])
    x = b.slice(b.slice(t, 1, 4, 1), 0, 2, 2)
    y = b.op("Add", [b.op("Reshape", [x, b.const([2, 6])]), b.op("Reshape", [b.slice(t, 0, 2, 1), b.const([2, 6])])])
    model = b.model([2, 3, 4], y, [2, 6])
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)}
    _check(model, feeds)


def test_dynamic_shapes_are_left_alone():
    b = Builder()
    x = b.op("Transpose", ["x"], perm=[1, 0])
    y = b.op("Transpose", [x], perm=[1, 0])
    model = b.model(["n", 4], y, ["n", 4])
    graph = load_onnx(model)
    infer_graph(graph)
    assert collapse_data_movement(graph) == 0


def test_integer_tensors_move_too():
    b = Builder()
    x = b.op("Transpose", [b.roll("x", 1, 6, 1)], perm=[1, 0, 2])
    model = b.model([2, 6, 8], x, [6, 2, 8], x_dtype=TensorProto.INT64)
    feeds = {"x": np.arange(96, dtype=np.int64).reshape(2, 6, 8)}
    assert [n.op_type for n in _prepared(model, feeds).nodes] == ["Reshape", "Gather", "Reshape"]
    _check(model, feeds)


@pytest.mark.parametrize("index, size, want", [
    (np.arange(12).reshape(3, 4), 12, (12, [0])),                                   # the identity
    (np.arange(12).reshape(3, 4)[::-1], 12, (4, [2, 1, 0])),                         # rows reversed
    (np.arange(12).reshape(3, 4).T, 12, (1, [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11])),  # a transpose
    (np.arange(24).reshape(2, 3, 4)[:, 1:], 24, (4, [1, 2, 4, 5])),                     # a slice of rows
    (np.array([2, 3, 0, 1, 6, 7]), 8, (2, [1, 0, 3])),                               # runs of 2 and 4
    (np.array([4, 5, 6, 7, 0, 1, 2, 3, 2, 3]), 8, (2, [2, 3, 0, 1, 1])),              # a later run breaks C=4
])
def test_rows_of_an_index_map(index, size, want):
    c, rows = _rows(np.ascontiguousarray(index), size)
    assert (c, rows.tolist()) == (want[0], list(want[1]))


def test_constant_index_gather_kernel_matches_numpy():
    data = np.random.default_rng(3).standard_normal((5, 6, 7)).astype(np.float32)
    for axis, indices in ((0, np.array([4, -1, 0, 2])), (1, np.array([[5, 0], [-6, 3]])), (2, np.array(3))):
        node = helper.make_node("Gather", ["d", "i"], ["y"], axis=axis)
        graph = load_onnx(helper.make_model(helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("d", TensorProto.FLOAT, data.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(indices.astype(np.int64), "i")]), opset_imports=[helper.make_opsetid("", 17)]))
        (got,) = evaluate_node(graph.nodes[0], [data, indices.astype(np.int64)])
        np.testing.assert_array_equal(got, np.take(data, indices, axis=axis))


# ------------------------------------------------------------------ a Swin block
def _swin_block(batch: int, h: int = 4, w: int = 8, c: int = 16, heads: int = 2, ws: int = 4, shift: int = 2):
    """One shifted-window attention block as torchvision's swin_t exports (pre-norm, residual), with
    seeded weights: LayerNorm, zero pad, roll by -shift, window partition, qkv, scaled q, q @ k^T +
    relative position bias, the shifted-window mask, softmax, @ v, proj, window reverse, roll back,
    crop, residual."""
    rng = np.random.default_rng(4)
    f32 = lambda a: np.asarray(a, np.float32)   # noqa: E731
    b = Builder()
    n, tokens, windows, hd = batch, ws * ws, (h // ws) * (w // ws), c // heads
    x = b.op("LayerNormalization", ["x", b.const(f32(1 + 0.1 * rng.standard_normal(c)), np.float32),
                                    b.const(f32(0.1 * rng.standard_normal(c)), np.float32)], axis=-1)
    x = b.op("Pad", [x, b.const([0] * 8)])
    x = b.roll(b.roll(x, -shift, h, 1), -shift, w, 2)
    x = _partition(b, x, n, h, w, c, ws)
    qkv = b.op("Add", [b.op("MatMul", [x, b.const(f32(rng.standard_normal((c, 3 * c)) / 4), np.float32)]),
                       b.const(f32(0.1 * rng.standard_normal(3 * c)), np.float32)])
    qkv = b.op("Transpose", [b.op("Reshape", [qkv, b.const([n * windows, tokens, 3, heads, hd])])],
               perm=[2, 0, 3, 1, 4])
    q = b.op("Mul", [b.op("Gather", [qkv, b.const(0)], axis=0), b.const(f32(hd ** -0.5), np.float32)])
    k = b.op("Transpose", [b.op("Gather", [qkv, b.const(1)], axis=0)], perm=[0, 1, 3, 2])
    v = b.op("Gather", [qkv, b.const(2)], axis=0)
    bias = f32(0.5 * rng.standard_normal((1, heads, tokens, tokens)))
    attn = b.op("Add", [b.op("MatMul", [q, k]), b.const(bias, np.float32)])
    region = np.zeros((h, w))
    cuts = ((0, -ws), (-ws, -shift), (-shift, None))
    for i, (hs, wsl) in enumerate((p, q_) for p in cuts for q_ in cuts):
        region[hs[0]:hs[1], wsl[0]:wsl[1]] = i
    region = region.reshape(h // ws, ws, w // ws, ws).transpose(0, 2, 1, 3).reshape(windows, tokens)
    mask = np.where(region[:, None, :] != region[:, :, None], -100.0, 0.0)[None, :, None]
    attn = b.op("Reshape", [attn, b.const([n, windows, heads, tokens, tokens])])
    attn = b.op("Add", [attn, b.const(f32(mask), np.float32)])
    attn = b.op("Softmax", [b.op("Reshape", [attn, b.const([n * windows, heads, tokens, tokens])])], axis=-1)
    y = b.op("Transpose", [b.op("MatMul", [attn, v])], perm=[0, 2, 1, 3])
    y = b.op("Reshape", [y, b.const([n * windows, tokens, c])])
    y = b.op("Add", [b.op("MatMul", [y, b.const(f32(rng.standard_normal((c, c)) / 4), np.float32)]),
                     b.const(f32(0.1 * rng.standard_normal(c)), np.float32)])
    y = _reverse(b, y, n, h, w, c, ws)
    y = b.roll(b.roll(y, shift, h, 1), shift, w, 2)
    y = b.slice(b.slice(y, 0, h, 1), 0, w, 2)
    out = b.op("Add", ["x", y])
    return b.model([batch, h, w, c], out, [batch, h, w, c])


@pytest.mark.parametrize("batch", [1, 2])
def test_swin_block_matches_onnxruntime(batch):
    model = _swin_block(batch)
    feeds = {"x": np.random.default_rng(5).standard_normal((batch, 4, 8, 16)).astype(np.float32)}
    s = _check(model, feeds, rtol=1e-5, atol=1e-5)
    ops = [n.op_type for n in s.graph.prepared_graph.nodes]
    # the rolls, the pad, the crop and the window partitions are gone; q, k, v are gathered from qkv
    assert not {"Slice", "Concat", "Pad"} & set(ops)
    assert ops.count("Gather") == 5 and ops.count("Transpose") == 2     # K^T and the heads' merge stay
    assert s.graph.pass_report["collapse_data_movement"] > 0
    # bias and mask are one constant (fold_constant_adds), added in the scores product's epilogue
    assert ops.count("Add") == 4 and s.graph.pass_report["fold_constant_adds"] == 1
    kernels = [t.op for t in s.profile(feeds, runs=1).nodes]
    assert kernels.count("Add") == 1                                     # the residual


# ------------------------------------------------------------------ random chains
def _random_chain(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A random chain of movement ops on one (2..3, 2..5, 2..5, 8) tensor, with branches that Concat
    back, read at the end by a Relu (or left as a graph output)."""
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(2, 4)), int(rng.integers(2, 6)), int(rng.integers(2, 6)), 8)
    b = Builder()
    x, s = "x", shape
    for _ in range(int(rng.integers(2, 7))):
        kind = rng.choice(["transpose", "slice", "roll", "reshape", "pad", "gather"])
        rank = len(s)
        if kind == "transpose":
            perm = [int(p) for p in rng.permutation(rank)]
            x, s = b.op("Transpose", [x], perm=perm), tuple(s[p] for p in perm)
        elif kind == "slice":
            axis = int(rng.integers(rank))
            if s[axis] < 2:
                continue
            start = int(rng.integers(0, s[axis] - 1))
            x = b.slice(x, start, s[axis], axis)
            s = s[:axis] + (s[axis] - start,) + s[axis + 1:]
        elif kind == "roll":
            axis = int(rng.integers(rank))
            x = b.roll(x, int(rng.integers(1, s[axis] + 1)), s[axis], axis)
        elif kind == "reshape":
            s = (int(np.prod(s[:2])),) + s[2:] if rank > 2 else (s[0], 1) + s[1:]
            x = b.op("Reshape", [x, b.const(list(s))])
        elif kind == "pad":
            x = b.op("Pad", [x, b.const([0] * (2 * rank))])
        else:
            axis = int(rng.integers(rank))
            idx = rng.integers(-s[axis], s[axis], size=int(rng.integers(1, 4)))
            x = b.op("Gather", [x, b.const(idx)], axis=axis)
            s = s[:axis] + (len(idx),) + s[axis + 1:]
    out = b.op("Relu", [x]) if rng.random() < 0.7 else x
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    return b.model(list(shape), out, list(s)), feeds


@pytest.mark.parametrize("seed", range(30))
def test_random_movement_chains_equal_onnxruntime(seed):
    model, feeds = _random_chain(seed)
    _check(model, feeds)
