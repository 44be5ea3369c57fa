"""openvino: Intel's OpenVINO runtime as an nnhal device (see openvino_device.py and docs/openvino.md)."""
