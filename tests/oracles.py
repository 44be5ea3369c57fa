"""Oracles whose verdict does not depend on the CPU running the tests.

onnxruntime is the oracle for float results. For quantized models it is not:
its u8*s8 integer kernels on x86-64 CPUs without AVX512-VNNI / AVX-VNNI
multiply-add pairs into saturating int16 (vpmaddubsw), so its results differ
from the exact integer arithmetic ONNX specifies, by CPU. Quantized results
are checked against ``onnx.reference`` (exact), and a test that must compare
with onnxruntime's integer kernels runs only where they are exact.
"""
from __future__ import annotations

import platform
from functools import lru_cache

import numpy as np
import onnx
from onnx import version_converter

# onnx.reference implements QuantizeLinear / DequantizeLinear from opset 19 on
REFERENCE_QDQ_OPSET = 21


def reference_outputs(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of ``onnx.reference.ReferenceEvaluator`` (the model converted to opset 21 when older)."""
    from onnx.reference import ReferenceEvaluator

    proto = onnx.load(str(model)) if not isinstance(model, onnx.ModelProto) else model
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), REFERENCE_QDQ_OPSET)
    if opset < REFERENCE_QDQ_OPSET:
        proto = version_converter.convert_version(proto, REFERENCE_QDQ_OPSET)
    return ReferenceEvaluator(proto).run(None, feeds)


@lru_cache(maxsize=1)
def cpu_has_vnni() -> bool:
    """Whether onnxruntime's x86 u8*s8 kernels are exact here (VNNI), or this is not an x86 CPU."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return True
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


NO_VNNI_REASON = ("onnxruntime's u8*s8 kernels saturate int16 pair sums on x86-64 CPUs without VNNI, so its "
                  "quantized results are not an oracle on this CPU (no exact reference exists for its contrib ops)")


def layerwise_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], cut: list[str],
                        values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each tensor of ``cut`` as onnx.reference computes it from the engine's own ``values`` of the other
    cut tensors: readers of a cut tensor read a new graph input fed with the engine's value.

    Errors then cannot cascade from layer to layer, so a quantized tensor is compared with the exact
    meaning of the one layer that produced it (onnx.reference accumulates in float32: within one
    quantization step of integer arithmetic, not bit-exact)."""
    cut_graph = onnx.ModelProto()
    cut_graph.CopyFrom(model)
    graph = cut_graph.graph
    renamed = {name: f"{name}__engine" for name in cut}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renamed:
                node.input[k] = renamed[name]
    for name in cut:
        graph.input.append(onnx.helper.make_tensor_value_info(renamed[name], onnx.TensorProto.UNDEFINED, None))
    del graph.output[:]
    for name in cut:
        graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None))
    outs = reference_outputs(cut_graph, {**feeds, **{renamed[n]: values[n] for n in cut}})
    return dict(zip(cut, outs))
