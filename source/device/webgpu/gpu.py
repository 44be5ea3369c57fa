"""The GPU behind the device: one adapter and one logical device, acquired lazily.

Importing wgpu and requesting an adapter costs about a second on lavapipe,
so registration does neither: the first ``describe`` (or pre_run) does, and
remembers the answer, including why there is no GPU.
"""
from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Gpu:
    """An opened adapter and device, or the reason there is none."""

    device: Any = None
    queue: Any = None
    name: str = ""
    features: frozenset[str] = frozenset()
    max_binding: int = 0            # max_storage_buffer_binding_size
    max_buffers: int = 0            # max_storage_buffers_per_shader_stage
    max_workgroups: int = 65535
    f16: bool = False               # shader-f16 enabled on the device: fp16 storage is possible
    timestamps: bool = False        # timestamp-query enabled: nnhal.profile times every dispatch on the GPU
    cpu_adapter: bool = False       # a software rasteriser (lavapipe): adapter_type 'CPU'
    unavailable: str = ""           # why there is no GPU; empty when there is one
    pipelines: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ok(self) -> bool:
        return not self.unavailable


def open_gpu(power_preference: str = "high-performance") -> Gpu:
    """Open the adapter the platform prefers; a Gpu with ``unavailable`` set when that fails."""
    try:
        import wgpu
    except ImportError as exc:
        return Gpu(unavailable=f"the Python package 'wgpu' is not installed ({exc}); pip install 'nnhal[webgpu]'")
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # NOTE: Mesa's Vulkan WSI prints "error: XDG_RUNTIME_DIR is invalid" to stderr without one; compute
        # needs no display, so a private empty folder keeps a headless run quiet
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="nnhal-xdg-")
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
    except Exception as exc:  # wgpu raises plain RuntimeError when no driver answers
        return Gpu(unavailable=f"wgpu found no adapter: {exc} (no Vulkan/Metal/D3D12 driver; on Linux install "
                               f"Mesa's lavapipe: apt-get install mesa-vulkan-drivers libvulkan1)")
    if adapter is None:
        return Gpu(unavailable="wgpu found no adapter (no Vulkan/Metal/D3D12 driver)")
    limits = adapter.limits
    # NOTE: ask for the adapter's own storage limits; WebGPU's defaults (8 buffers, 128 MiB) are lower
    wanted = {k: limits[k] for k in ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size",
                                     "max-buffer-size", "max-compute-workgroup-storage-size",
                                     "max-compute-invocations-per-workgroup") if k in limits}
    f16 = "shader-f16" in adapter.features
    timestamps = "timestamp-query" in adapter.features
    features = [f for f, on in (("shader-f16", f16), ("timestamp-query", timestamps)) if on]
    try:
        device = adapter.request_device_sync(required_limits=wanted, required_features=features)
    except Exception as exc:
        return Gpu(unavailable=f"wgpu could not open a device on adapter '{adapter.info.get('device', '?')}': {exc}")
    info = adapter.info
    return Gpu(device=device, queue=device.queue,
               name=f"{info.get('device', '?')} ({info.get('backend_type', '?')}, {info.get('adapter_type', '?')})",
               features=frozenset(adapter.features), max_binding=int(limits["max-storage-buffer-binding-size"]),
               max_buffers=int(limits["max-storage-buffers-per-shader-stage"]),
               max_workgroups=int(limits["max-compute-workgroups-per-dimension"]),
               cpu_adapter=str(info.get("adapter_type", "")).upper() == "CPU", f16=f16, timestamps=timestamps)


def pipeline(gpu: Gpu, source: str) -> Any:
    """The compute pipeline of one WGSL source (entry point ``main``), compiled once per device."""
    with gpu.lock:
        found = gpu.pipelines.get(source)
        if found is None:
            module = gpu.device.create_shader_module(code=source)
            found = gpu.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
            gpu.pipelines[source] = found
        return found
