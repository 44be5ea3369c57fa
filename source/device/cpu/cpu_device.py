"""The CPU device: the host kernels (nnhal.hostkernels) planned into a flat plan, always registered.

Hooks first, then the record, then register/unregister, as every device
module reads.
"""
from __future__ import annotations

import math
import os
import statistics

import numpy as np

from nnhal.device.cpu import native, parallel, qnative
from nnhal.device.cpu.fp16 import COMPUTE, to_fp16_storage
from nnhal.device.cpu.kernels import control, implementations
from nnhal.device.cpu.plan import NESTED, Plan, compile_nodes
from nnhal.device.cpu.threads import use_threads
from nnhal.device.device import (
    HOST_MEMORY,
    Allocator,
    Candidate,
    Description,
    Device,
    Interface,
    NodeTiming,
    Optimizer,
    Performance,
    Verdict,
)
from nnhal.device.manager import register_device, unregister_device
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.hostkernels.base import checking
from nnhal.hostkernels.graphrun import tensor_info
from nnhal.hostkernels.table import DOMAINS
from nnhal.optimizer.precision import to_quantized
from nnhal.optimizer.qtables import fuse_code_tables


def cpu_pre_run(device: Device, subgraph: Subgraph, options) -> None:
    """Choose kernels, plan the arena and prepare every node into a flat plan."""
    subgraph.device_graph = compile_nodes(subgraph.graph, subgraph.nodes, subgraph.inputs, subgraph.outputs)
    subgraph.stats["arena_bytes"] = subgraph.device_graph.memory.arena_bytes
    subgraph.stats["kernels"] = subgraph.device_graph.kernels
    median = _median_product(subgraph)
    iterates = control.iterates(subgraph.nodes)
    # a plan of tiny products runs on one thread (parallel.serial), whatever num_thread allows
    subgraph.stats["num_thread"] = 1 if not iterates and parallel.serial(median) else getattr(options, "num_thread", 0)
    subgraph.stats["thread_pool"] = parallel.choose(median, iterates)
    # NOTE: NNHAL_CHECK and NNHAL_CPU_POOL are read here, once per plan, not per run (~1-2 us each)
    subgraph.stats["check"] = checking()


# the nodes whose output size says whether a plan's work is large enough for the thread pools
_PRODUCTS = frozenset({"Conv", "MatMul", "Gemm", "ConvTranspose", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                       "ConvInteger", "DynamicQuantizeGemm"})


def _median_product(subgraph: Subgraph) -> float:
    """The median number of output elements of the subgraph's Conv, MatMul and Gemm nodes, those of its If
    branches included (0 if none or their shapes are not static)."""
    sizes = []
    for node in subgraph.nodes:
        if node.op_type in _PRODUCTS and node.outputs:
            info = tensor_info(subgraph.graph, node.outputs[0])
            if info is not None and info.shape is not None and all(isinstance(d, int) for d in info.shape):
                sizes.append(math.prod(info.shape))
        sizes += control.branch_products(subgraph.graph, node, _PRODUCTS)
    return statistics.median(sizes) if sizes else 0.0


def cpu_run(device: Device, subgraph: Subgraph) -> None:
    """Run the plan: inputs from subgraph.values, outputs into it, on the threads its prepare chose."""
    plan: Plan = subgraph.device_graph
    stats = subgraph.stats
    use_threads(stats.get("num_thread", 0), stats.get("thread_pool", True))
    try:
        plan.run(subgraph.values, stats.get("check", False))
    finally:
        parallel.rest()


def cpu_release_graph(device: Device, device_graph) -> None:
    """Drop the plan (its arena goes with it)."""


def cpu_profile(device: Device, subgraph: Subgraph, enable: bool) -> list[NodeTiming] | None:
    """Time every step of the plan while enabled: kernel calls, with the implementation that ran each (a
    fused node stands for its chain; a ``to-nhwc``/``to-nchw`` step is an inserted layout conversion). The
    steps of If branches and Loop/Scan bodies are rows of their own (their plans' steps, exclusive times);
    the control-flow node keeps only its own bookkeeping."""
    plan: Plan = subgraph.device_graph
    if enable:
        plan.timings = [0.0] * len(plan.steps)
        NESTED.start()
        return None
    timings, plan.timings = plan.timings, None
    rows = [NodeTiming(step.node.name, step.node.op_type, step.kernel_name, t)
            for step, t in zip(plan.steps, timings or ())]
    for body, body_timings in NESTED.stop(plan):
        rows += [NodeTiming(step.node.name, step.node.op_type, step.kernel_name, t)
                 for step, t in zip(body.steps, body_timings) if t]
    return rows


def _native_state() -> str:
    """Whether the native kernels (device/cpu/native) run, and why not, for ``nnhal devices``."""
    status = native.status()
    if not status.available:
        return f"off: {status.reason}"
    pool = "on" if parallel.native_pool() else "off (NNHAL_CPU_POOL=0)"
    blas = native.blas_info()
    return (f"loaded (depthwise conv, gates, Gelu, block quantization; thread pool {pool}; BLAS {blas['library']}: "
            f"{blas['config'].strip()}, {blas['threads']} threads now: 1 inside the pool's parts, num_thread without "
            "the pool)")


def _integer_state() -> str:
    """Whether the integer GEMM and convolution kernels (device/cpu/qnative) run, on which instruction set."""
    status = qnative.status()
    return f"{'on' if status.available else 'off'}: {status.reason}"


# Instruction sets whose integer GEMM beats float32 BLAS on the dynamic products. With VNNI bytes are multiplied
# at full rate. The exact AVX2 path widens them to 16 bits (vpmaddwd) and first lost to the float path (42.7 ms
# against 30.5 for blocks of 8 on a quiet 2-core AVX2 EPYC, MiniLM b1x128); since its parts run on the device's
# persistent pool it wins there: 18.8 ms whole rows, 26.6 blocks of 8, fp32 23.8 (benchmarks/int8.py,
# 2026-11-28 05:57, quiet; cosine against fp32 0.9993 and 0.9999). The portable C path keeps the float default.
WHOLE_ROW_ISAS = frozenset({"avx512vnni", "avxvnni", "avx2"})


def dynamic_block() -> int | None:
    """Whole rows (0, one scale per token) where the integer GEMM runs the dynamic products faster than
    float32 (WHOLE_ROW_ISAS), which sums int8 over the whole depth; else None, the core's per-block default,
    run dequantized in float32."""
    return 0 if qnative.available() and qnative.status().isa in WHOLE_ROW_ISAS else None


def conv_weight_levels() -> int:
    """The int8 precision pass's weight levels for the convolutions it lowers to QLinearConv: 64 (7-bit
    weights) where the integer GEMM runs the avx2 path, whose vpmaddubsw is exact on them and about 0.7x the
    16-bit path's time (docs/int8.md); else 127. NNHAL_NARROW_WEIGHTS=0 / 1 forces 127 / 64."""
    forced = os.environ.get("NNHAL_NARROW_WEIGHTS", "")
    if forced in ("0", "1"):
        return 64 if forced == "1" else 127
    return 64 if qnative.available() and qnative.status().isa == "avx2" else 127


# the largest depth (input channels x kernel taps) of a convolution on a float model input that stays float
FLOAT_CONV_MAX_K = 32


def float_conv(node: Node, graph: Graph) -> bool:
    """Whether the int8 / uint8 precision pass should leave ``node`` (a float Conv) in float where the integer
    kernels run the avx2 path: a group-1 convolution of a float input of the subgraph (the image) with at most
    FLOAT_CONV_MAX_K multiply-adds per output (a detector's 3 -> 16 3x3 stem: K = 27).
    NOTE: at such depths the integer convolution's per-pixel work (packing the taps, the requantizing write-back)
    outweighs its products: the detector's stem ran at 7 GMAC/s int8 against 11.5 fp32 (docs/int8.md, "Per
    convolution"); in float it also needs no QuantizeLinear of the image, only one of its output. ResNet-50's
    7x7 stem (K = 147) and the 3x3 convolutions that fp32 runs by Winograd were faster in int8 (same section).
    NNHAL_FLOAT_CONVS=0 / 1 forces never / on every instruction set."""
    forced = os.environ.get("NNHAL_FLOAT_CONVS", "")
    if forced == "0" or (forced != "1" and not (qnative.available() and qnative.status().isa == "avx2")):
        return False
    w = graph.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if node.inputs[0] not in graph.inputs or w is None or not w.is_constant or w.value is None or w.value.ndim != 4:
        return False
    return node.attrs.get("group", 1) == 1 and int(np.prod(w.value.shape[1:])) <= FLOAT_CONV_MAX_K


def cpu_describe(device: Device) -> Description:
    return Description(
        ops=frozenset(op for table in DOMAINS.values() for op in table),
        precisions=("fp32", "fp16", "int8", "uint8"),
        performance={"fp32": Performance(1.0, 1.0)},
        summary=f"numpy reference and fast kernels, native C kernels {_native_state()}; integer kernels "
                f"{_integer_state()}; int8 convolution weights {7 if conv_weight_levels() == 64 else 8}-bit; "
                f"dynamic token products' activations {qnative.describe_activation_mode()}; "
                f"full-range 8-bit weights on avx2 {qnative.describe_split_mode()}; "
                f"int8 3x3 stride-1 convolutions {qnative.describe_winograd_mode()}; "
                f"fp16 is {COMPUTE}",
        # NOTE: numpy has no float16 matrix product; fp16 computed in float16 ran 4x-16x slower than fp32.
        compute={"fp16": COMPUTE},
        reentrant=True,         # a plan's run takes its own arena from a pool (plan.py)
        activation_quantization=("static", "dynamic"),
        dynamic_block=dynamic_block(),
        memory=HOST_MEMORY,     # its memory is the host's: a boundary tensor is the numpy array itself
    )


def cpu_evaluation(device: Device, candidate: Candidate) -> Verdict:
    """Accept a node when one of its CPU kernels scores above zero."""
    node = candidate.node
    impls = implementations(node.op_type, node.domain)
    if not impls:
        return Verdict.no(f"no CPU kernel for {node.op_type}")
    for impl in impls:
        if impl.score(node, candidate.inputs, candidate.outputs) > 0:
            return Verdict.yes()
    return Verdict.no(f"no CPU kernel of {node.op_type} accepts these attributes, shapes and dtypes")


def cpu_optimize_graph(subgraph: Subgraph, precision: str) -> Subgraph:
    """fp16: float16 weights and boundaries, float32 compute (fp16.py); int8/uint8: QLinearConv for
    convolutions and matrix products, QLinear ops for add, mul, concat and average pools, integers
    through data movement and max pooling, float elsewhere (optimizer/precision.py); the token products the
    core marked dynamic take per-token activation scales (DynamicQuantizeGemm; whole rows on the integer
    GEMM where it runs, as ``dynamic_block`` declares and the core resolves into ``subgraph.dynamic_block``);
    element-wise chains between 8-bit tensors (a quantized SiLU) then become lookup tables (optimizer/qtables.py)."""
    if precision == "fp16":
        return to_fp16_storage(subgraph)
    if precision in ("int8", "uint8"):
        lowered = to_quantized(subgraph, precision, dynamic=True, conv_levels=conv_weight_levels(),
                               float_conv=float_conv)
        if fuse_code_tables(lowered.graph):
            lowered.nodes = lowered.graph.nodes
        return lowered
    return subgraph


CPU_INTERFACE = Interface(run=cpu_run, pre_run=cpu_pre_run, release_graph=cpu_release_graph, profile=cpu_profile)
CPU_ALLOCATOR = Allocator(describe=cpu_describe, evaluation=cpu_evaluation)
# the optimizer's fp32 runs (calibration, sensitivities) compile their host-kernel graphs with the cpu plan
# (fusions, layouts, arena): Optimizer.compile_graph
CPU_OPTIMIZER = Optimizer(optimize_graph=cpu_optimize_graph, compile_graph=compile_nodes)


def register_cpu_device() -> None:
    register_device(Device(name="cpu", interface=CPU_INTERFACE, allocator=CPU_ALLOCATOR,
                           optimizer=CPU_OPTIMIZER))


def unregister_cpu_device() -> None:
    unregister_device("cpu")
