"""The cpu device's integer kernels for com.microsoft QGemm, DynamicQuantizeMatMul and QAttention against the
numpy kernels on the pool, in one process, alternating (the integer kernel taken out of
device/cpu/integer.py's table while the second session plans). Run with the OpenBLAS tuning variables unset:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/qcontrib.py [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import integer

M, K, N = 1024, 384, 1536
U8, F32 = TensorProto.UINT8, TensorProto.FLOAT


def _model(op: str, inputs: list[str], x_type: int, inits: dict, y_type: int, **attrs):
    node = helper.make_node(op, inputs, ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, None)],
                              [helper.make_tensor_value_info("y", y_type, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def _cases(rng) -> dict:
    """name -> (model, input, the op's key in integer._KERNELS)"""
    w = rng.integers(-128, 128, (K, N)).astype(np.int8)
    f32 = np.float32
    qgemm = {"as": np.array(0.02, f32), "az": np.array(120, np.uint8), "w": w, "ws": np.array(0.003, f32),
             "wz": np.array(0, np.int8), "c": rng.integers(-999, 999, N).astype(np.int32),
             "ys": np.array(0.5, f32), "yz": np.array(128, np.uint8)}
    dqmm = {"w": w, "ws": np.full(N, 0.003, f32), "bias": rng.standard_normal(N).astype(f32)}
    qatt = {"wq": rng.integers(-128, 128, (K, 3 * K)).astype(np.int8), "bq": rng.standard_normal(3 * K).astype(f32),
            "as": np.array(0.02, f32), "ws": np.array(0.003, f32), "az": np.array(120, np.uint8),
            "wz": np.array(0, np.int8)}
    return {
        f"QGemm u8 out [{M},{K}]x[{K},{N}]": (
            _model("QGemm", ["x", "as", "az", "w", "ws", "wz", "c", "ys", "yz"], U8, qgemm, U8),
            rng.integers(0, 256, (M, K)).astype(np.uint8), ("com.microsoft", "QGemm")),
        f"DynamicQuantizeMatMul [8,128,{K}]x[{K},{N}]": (
            _model("DynamicQuantizeMatMul", ["x", "w", "ws", "", "bias"], F32, dqmm, F32),
            rng.standard_normal((8, 128, K)).astype(f32), ("com.microsoft", "DynamicQuantizeMatMul")),
        f"QAttention [8,128,{K}] 12 heads": (
            _model("QAttention", ["x", "wq", "bq", "as", "ws", "", "az", "wz"], U8, qatt, F32, num_heads=12),
            rng.integers(0, 256, (8, 128, K)).astype(np.uint8), ("com.microsoft", "QAttention")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    for name, (model, x, key) in _cases(np.random.default_rng(0)).items():
        fast = nnhal.Session(model)
        kernel = integer._KERNELS.pop(key)
        slow = nnhal.Session(model)
        y_slow = slow.run({"x": x})[0]                  # planned (without the integer kernel) on its first run
        integer._KERNELS[key] = kernel
        y_fast = fast.run({"x": x})[0]
        times: dict[str, list[float]] = {"integer": [], "numpy": []}
        for _ in range(args.rounds):
            for label, session in (("integer", fast), ("numpy", slow)):
                start = time.perf_counter()
                session.run({"x": x})
                times[label].append(time.perf_counter() - start)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        diff = np.abs(y_fast.astype(np.float64) - y_slow).max()
        print(f"{name}: integer {med['integer']:.2f} ms, numpy {med['numpy']:.2f} ms, "
              f"ratio {med['integer'] / med['numpy']:.2f}, max|diff| {diff:.3g}")


if __name__ == "__main__":
    main()
