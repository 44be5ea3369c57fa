"""Model import and export."""
from nnhal.serializer.onnx_import import load_onnx

__all__ = ["load_onnx"]
