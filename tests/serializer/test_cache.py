"""The compiled-model cache: hits skip the importer, and every defective or untrusted entry is refused."""
from __future__ import annotations

import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.serializer import cache
from nnhal.serializer.onnx_import import load_onnx
from tests.conftest import make_model, vinfo


def small_model(scale: float) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((4, 4), scale, np.float32), "w")
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vinfo("x", [2, 4])], [vinfo("y", [2, 4])], [w])


class CountingImporter:
    """The real importer, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, source):
        self.calls += 1
        return load_onnx(source)


@pytest.fixture
def cache_dir(tmp_path):
    d = tmp_path / "cc"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def model_path(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(small_model(0.5), p)
    return p


def entries(d):
    return sorted(d.glob("*.nnhc"))


def test_a_hit_skips_the_importer_and_runs_the_same(cache_dir, model_path):
    load = CountingImporter()
    first = cache.load_cached(model_path, cache_dir, load)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        second = cache.load_cached(model_path, cache_dir, load)
    assert load.calls == 1 and len(entries(cache_dir)) == 1
    np.testing.assert_array_equal(second.tensors["w"].value, first.tensors["w"].value)
    x = np.ones((2, 4), np.float32)
    with nnhal.Session(model_path, devices=["cpu"], compiled_cache=cache_dir) as s:
        np.testing.assert_array_equal(s.run({"x": x})[0], np.full((2, 4), 2.0, np.float32))


def test_bytes_sources_are_keyed_by_their_hash(cache_dir):
    load = CountingImporter()
    a, b = small_model(1.0).SerializeToString(), small_model(2.0).SerializeToString()
    ga = cache.load_cached(a, cache_dir, load)
    gb = cache.load_cached(b, cache_dir, load)
    ga2 = cache.load_cached(a, cache_dir, load)
    assert load.calls == 2 and len(entries(cache_dir)) == 2
    assert ga2.tensors["w"].value[0, 0] == ga.tensors["w"].value[0, 0] == 1.0
    assert gb.tensors["w"].value[0, 0] == 2.0


def test_a_rewritten_file_is_hashed_again(cache_dir, model_path):
    load = CountingImporter()
    cache.load_cached(model_path, cache_dir, load)
    onnx.save(small_model(3.0), model_path)
    st = os.stat(model_path)
    os.utime(model_path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    g = cache.load_cached(model_path, cache_dir, load)
    assert load.calls == 2 and g.tensors["w"].value[0, 0] == 3.0


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic"])
def test_a_corrupt_entry_is_ignored_with_a_warning_and_rewritten(cache_dir, model_path, damage):
    load = CountingImporter()
    cache.load_cached(model_path, cache_dir, load)
    (entry,) = entries(cache_dir)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[-10] ^= 0xFF      # inside the weights
    elif damage == "truncate":
        data = data[:-64]
    else:
        data[0:4] = b"XXXX"
    entry.write_bytes(bytes(data))
    with pytest.warns(cache.CacheWarning, match="ignoring compiled cache entry"):
        g = cache.load_cached(model_path, cache_dir, load)
    assert load.calls == 2 and g.tensors["w"].value[0, 0] == 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        cache.load_cached(model_path, cache_dir, load)   # the rewritten entry is good
    assert load.calls == 2


def test_an_entry_for_another_key_is_stale(cache_dir, model_path):
    graph = load_onnx(model_path)
    key = {**cache._versions(), "model_sha256": "0" * 64}
    entry = cache_dir / "e.nnhc"
    cache.write_entry(entry, key, graph)
    assert cache.read_entry(entry, key).tensors["w"].value[0, 0] == 0.5
    with pytest.raises(ValueError, match="stale"):
        cache.read_entry(entry, {**key, "nnhal": "0.0.0-other"})


def test_a_directory_others_can_write_is_not_used(tmp_path, model_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    load = CountingImporter()
    with pytest.warns(cache.CacheWarning, match="writable by group or others"):
        g = cache.load_cached(model_path, d, load)
    assert load.calls == 1 and g.tensors["w"].value[0, 0] == 0.5 and not entries(d)


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 64 * 5, 64 * 5 + 17])
def test_the_tree_checksum_is_the_same_written_in_parts_and_read_in_threads(monkeypatch, size):
    monkeypatch.setattr(cache, "PIECE", 64)     # many pieces, boundaries inside and between the parts
    data = bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8))
    parts = [data[:size // 3], b"", data[size // 3:size // 2], data[size // 2:]]
    whole = cache._checksum(memoryview(data))
    assert cache._checksum_of_parts(parts) == whole
    for at in {0, size // 2, size - 1} if size else ():
        flipped = bytearray(data)
        flipped[at] ^= 1
        assert cache._checksum(memoryview(bytes(flipped))) != whole
    assert cache._checksum(memoryview(data + b"\0")) != whole


def test_a_byte_flipped_in_a_late_piece_is_refused(cache_dir, model_path, monkeypatch):
    monkeypatch.setattr(cache, "PIECE", 64)     # the entry spans several pieces, hashed on threads
    load = CountingImporter()
    cache.load_cached(model_path, cache_dir, load)
    (entry,) = entries(cache_dir)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x01
    entry.write_bytes(bytes(data))
    with pytest.warns(cache.CacheWarning, match="ignoring compiled cache entry"):
        cache.load_cached(model_path, cache_dir, load)
    assert load.calls == 2
