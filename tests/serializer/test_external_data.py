"""Untrusted models: external data resolve inside the model's folder only, ranges are checked before
reading, empty and graphless models are refused."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal.serializer import load_onnx

W = np.arange(4, dtype=np.float32) + 0.5


def _external_model(location: str, offset: int | None = None, length: int | None = None,
                    dims: tuple = (4,)) -> onnx.ModelProto:
    """y = x + w, with w (float32 ``dims``) kept in external file ``location``."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        w.external_data.add(key=key, value=value)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _save(folder: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(model.SerializeToString())
    return path


def _run(model, base_dir=None) -> np.ndarray:
    with nnhal.Session(model, base_dir=base_dir) as s:
        return s.run({"x": np.zeros(4, np.float32)})[0]


@pytest.fixture
def secret_in_cwd(tmp_path, monkeypatch) -> Path:
    """A file 'secret.bin' in the current directory that no model may read."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "secret.bin").write_bytes(np.full(4, 7.0, np.float32).tobytes())
    monkeypatch.chdir(cwd)
    return cwd / "secret.bin"


@pytest.mark.parametrize("as_bytes", [True, False])
def test_bytes_or_proto_with_external_data_need_base_dir(secret_in_cwd, as_bytes):
    model = _external_model("secret.bin")
    source = model.SerializeToString() if as_bytes else model
    with pytest.raises(nnhal.ModelError, match="base_dir"):
        load_onnx(source)
    with pytest.raises(nnhal.ModelError, match="base_dir"):
        nnhal.Session(source)


def test_explicit_base_dir_resolves_external_data(tmp_path):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    model = _external_model("w.bin")
    np.testing.assert_array_equal(_run(model.SerializeToString(), base_dir=str(tmp_path)), W)
    np.testing.assert_array_equal(_run(model, base_dir=tmp_path), W)


def test_path_resolves_in_its_own_folder_not_the_cwd(tmp_path, secret_in_cwd):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "secret.bin").write_bytes(W.tobytes())
    np.testing.assert_array_equal(_run(str(_save(folder, _external_model("secret.bin")))), W)
    np.testing.assert_array_equal(_run(str(_save(folder, _external_model("./secret.bin"), "dot.onnx"))), W)


@pytest.mark.parametrize("location", ["{secret}", "../cwd/secret.bin", "sub/../../cwd/secret.bin",
                                      "..\\cwd\\secret.bin", "C:\\secret.bin", "\\\\host\\share\\secret.bin", ""])
def test_locations_leaving_the_folder_are_refused(tmp_path, secret_in_cwd, location):
    folder = tmp_path / "m"
    (folder / "sub").mkdir(parents=True)
    location = location.format(secret=secret_in_cwd)
    path = _save(folder, _external_model(location))
    with pytest.raises(nnhal.ModelError, match="tensor 'w'"):
        load_onnx(str(path))


def test_symlink_leaving_the_folder_is_refused_and_one_inside_is_followed(tmp_path, secret_in_cwd):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "out.bin").symlink_to(secret_in_cwd)
    (folder / "real.bin").write_bytes(W.tobytes())
    (folder / "in.bin").symlink_to(folder / "real.bin")
    (tmp_path / "linkdir").symlink_to(secret_in_cwd.parent, target_is_directory=True)
    (folder / "d").symlink_to(tmp_path / "linkdir", target_is_directory=True)
    with pytest.raises(nnhal.ModelError, match="outside the model's folder"):
        load_onnx(str(_save(folder, _external_model("out.bin"))))
    with pytest.raises(nnhal.ModelError, match="outside the model's folder"):
        load_onnx(str(_save(folder, _external_model("d/secret.bin"))))
    np.testing.assert_array_equal(_run(str(_save(folder, _external_model("in.bin")))), W)


@pytest.mark.parametrize("offset, length, match", [
    (8, 16, "beyond the end"),              # 16 bytes from offset 8 in a 16-byte file
    (20, None, "beyond the end"),           # no length: the 16 declared bytes from offset 20
    (8, None, "runs from offset 8 to the end of its 16-byte file: 8 bytes"),
    (0, 12, "differs from its declared size"),
    (0, 1 << 40, "differs from its declared size"),
    (-4, None, "negative"),
    ("x", None, "not an integer"),
])
def test_ranges_are_checked_before_reading(tmp_path, offset, length, match):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    model = _external_model("w.bin", offset, length)
    with pytest.raises(nnhal.ModelError, match=match):
        load_onnx(model, base_dir=tmp_path)


def test_offset_reads_only_its_range(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\xff" * 12 + W.tobytes() + b"\xff" * 12)
    np.testing.assert_array_equal(_run(_external_model("w.bin", 12, 16), base_dir=tmp_path), W)


def test_a_four_byte_tensor_on_a_one_gib_sparse_file(tmp_path):
    """With an explicit length of 4 only those 4 bytes are read (RSS stays small); a 1 GiB length is refused
    unread, and so is no length at all: then the data runs to the end of the file (the ONNX rule), 1 GiB
    against the 4 bytes the tensor declares. /proc/self/io's rchar shows that refusal read nothing."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    script = textwrap.dedent(f"""
        import numpy as np, onnx, nnhal
        from onnx import TensorProto, helper
        from nnhal.serializer import load_onnx
        def model(length):
            w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1])
            w.data_location = TensorProto.EXTERNAL
            w.external_data.add(key="location", value="big.bin")
            if length is not None:
                w.external_data.add(key="length", value=str(length))
            g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [w])
            return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        def rchar():
            return int(next(line.split()[1] for line in open("/proc/self/io") if line.startswith("rchar:")))
        graph = load_onnx(model(4), base_dir={str(tmp_path)!r})
        assert graph.tensors["w"].value.tolist() == [0.0]
        for length in (1 << 30, None):
            before = rchar()
            try:
                load_onnx(model(length), base_dir={str(tmp_path)!r})
                raise SystemExit(f"length {{length}} on a 4-byte tensor in a 1 GiB file was accepted")
            except nnhal.ModelError as exc:
                read = rchar() - before
                assert read < 4096, (length, read)      # the /proc files read above, not the data file
                assert length is not None or "runs from offset 0 to the end of its 1073741824-byte file" in str(exc)
        # NOTE: VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child of a big pytest
        # process would report the parent's peak; the exec'd process's own mm starts VmHWM afresh
        print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 500 * 1024     # VmHWM is in KiB


@pytest.mark.parametrize("make", [
    lambda p: b"",
    lambda p: str(p / "empty.onnx"),
    lambda p: onnx.ModelProto(),
    lambda p: helper.make_model(helper.make_graph([], "g", [], []), opset_imports=[
        helper.make_opsetid("", 17)]),
    lambda p: onnx.ModelProto(ir_version=8, producer_name="no graph"),
    lambda p: b"\x08\x08",                  # valid protobuf: ir_version 8 and nothing else
])
def test_empty_and_graphless_models_are_refused(tmp_path, make):
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(nnhal.ModelError):
        nnhal.Session(make(tmp_path))


def test_not_a_model_is_refused():
    with pytest.raises(nnhal.ModelError, match="path, bytes or an onnx.ModelProto"):
        load_onnx(12)
    with pytest.raises(nnhal.ModelError):
        load_onnx(b"\xff" * 64)
