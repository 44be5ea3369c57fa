"""Data files shipped with nnhal: digits_cnn.onnx (tools/train_digits.py)."""
