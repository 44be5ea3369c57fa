"""WGSL kernels of the webgpu device: one op (or op family) per file, listed in table.py."""
