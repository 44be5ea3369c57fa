"""Train the digits CNN shipped as source/data/digits_cnn.onnx (kept for reproducibility).

How it was run (CPU, a few seconds):

    /work/venv2/bin/pip install scikit-learn torch==2.13.0
    /work/venv2/bin/python tools/train_digits.py            # writes source/data/digits_cnn.onnx

Data: scikit-learn's 8x8 digits (1,797 images, no download), pixels 0..16
scaled to [0, 1] as float32 [N, 1, 8, 8]; split with
``train_test_split(test_size=450, random_state=0, stratify=y)`` into 1,347
training and 450 held-out images (``split()`` below; the tests recreate it).

Model (ONNX opset 17, input "input" float32 [N, 1, 8, 8], output "logits" [N, 10]):
Conv 3x3 16ch + Relu, Conv 3x3 32ch + Relu (no padding: 8 -> 6 -> 4),
MaxPool 2 (-> 32x2x2), Flatten, Gemm 64 + Relu, Gemm 10.
Trained with torch (seeded, deterministic, one thread); the ONNX graph is
built with onnx.helper from the trained weights (no exporter needed), and
checked against torch with onnxruntime.

Printed by the run that produced the committed file (torch 2.13.0+cpu,
scikit-learn 1.9.1, numpy 2.4.6; two runs give byte-identical files):
    wrote source/data/digits_cnn.onnx (55,766 bytes)
    train accuracy (fp32): 1.0000 on 1347 images
    held-out accuracy (fp32): 0.9867 (444/450)
tests/models/test_digits.py checks nnhal reproduces 444/450.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "source" / "data" / "digits_cnn.onnx"
SEED = 0
HELD_OUT = 450


def split():
    """(x_train, x_test, y_train, y_test): float32 [N,1,8,8] in [0,1] and int64 labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=HELD_OUT, random_state=SEED, stratify=y)


def train(x_train, y_train, epochs: int = 40):
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(),
        nn.Conv2d(16, 32, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 2 * 2, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 32):
            idx = perm[i:i + 32]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
        sched.step()
    model.eval()
    return model


def to_onnx(model):
    """The trained torch model as an ONNX opset-17 ModelProto built with onnx.helper."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv1, _, conv2, _, _, _, fc1, _, fc2 = model
    w = lambda p: p.detach().numpy().astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(w(p), name) for name, p in [
        ("conv1.weight", conv1.weight), ("conv1.bias", conv1.bias),
        ("conv2.weight", conv2.weight), ("conv2.bias", conv2.bias),
        ("fc1.weight", fc1.weight), ("fc1.bias", fc1.bias),
        ("fc2.weight", fc2.weight), ("fc2.bias", fc2.bias)]]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["conv1"], name="conv1",
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("Conv", ["relu1", "conv2.weight", "conv2.bias"], ["conv2"], name="conv2",
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["fc1"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1"], ["relu3"], name="relu3"),
        helper.make_node("Gemm", ["relu3", "fc2.weight", "fc2.bias"], ["logits"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="nnhal-train-digits")
    proto.ir_version = 8
    proto.doc_string = ("8x8 digits CNN (scikit-learn load_digits, pixels/16), trained by tools/train_digits.py; "
                        "held-out = train_test_split(test_size=450, random_state=0, stratify=y)")
    onnx.checker.check_model(proto, full_check=True)
    return proto


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(OUT))
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch

    x_train, x_test, y_train, y_test = split()
    model = train(x_train, y_train, args.epochs)
    with torch.no_grad():
        ref = model(torch.from_numpy(x_test)).numpy()
    proto = to_onnx(model)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"input": x_test})[0]
    np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-4)
    onnx.save(proto, args.output)
    train_acc = float((sess.run(None, {"input": x_train})[0].argmax(1) == y_train).mean())
    acc = float((logits.argmax(1) == y_test).mean())
    correct = int((logits.argmax(1) == y_test).sum())
    print(f"wrote {args.output} ({Path(args.output).stat().st_size:,} bytes)")
    print(f"train accuracy (fp32): {train_acc:.4f} on {len(y_train)} images")
    print(f"held-out accuracy (fp32): {acc:.4f} ({correct}/{len(y_test)})")
    return 0 if acc >= 0.97 else 1


if __name__ == "__main__":
    sys.exit(main())
