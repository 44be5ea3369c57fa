"""Modern architectures for ``benchmarks/modern.py``, written in plain torch.

Each module mirrors the structure of its torchvision / transformers definition (depthwise convs,
squeeze-excite, hardswish/SiLU, channel LayerNorm, patch attention, GELU) with seeded random weights;
torchvision itself cannot be installed beside the CPU torch wheel this machine has.
"""
