"""The webgpu device: WGSL compute shaders through wgpu-py."""
