"""ConvTranspose: N-d transposed convolution with groups, output_padding and output_shape."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import check_positive
from nnhal.operator.base import Info, Prototype
from nnhal.operator.spatial import check_window


class ConvTranspose(Prototype):
    op_type = "ConvTranspose"
    versions = (1, 11, 22)
    inputs = (2, 3)
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "output_padding": None, "output_shape": None, "pads": None, "strides": None}

    def check(self, node: Node) -> None:
        if node.attrs["group"] < 1:
            raise ModelError(f"{where(node)}: group must be >= 1, got {node.attrs['group']}")
        check_positive(node, "strides", "dilations", "kernel_shape")

    def geometry(self, node: Node, x_shape: tuple, w_shape: tuple) -> dict:
        """Kernel, strides, dilations, explicit pads and output sizes."""
        n = len(x_shape) - 2
        if len(w_shape) != len(x_shape):
            raise self.fail(node, f"input rank {len(x_shape)} and weight rank {len(w_shape)} do not form a "
                                  f"transposed convolution")
        if node.attrs["kernel_shape"] is not None and list(node.attrs["kernel_shape"]) != list(w_shape[2:]):
            raise self.fail(node, f"kernel_shape {list(node.attrs['kernel_shape'])} differs from the weight's "
                                  f"spatial dims {tuple(w_shape[2:])}")
        in_sizes = list(x_shape[2:])
        kernel = list(node.attrs["kernel_shape"] or w_shape[2:])
        strides = list(node.attrs["strides"] or [1] * n)
        dilations = list(node.attrs["dilations"] or [1] * n)
        check_window(node, n, kernel, strides, dilations)
        out_pad = list(node.attrs["output_padding"] or [0] * n)[:n]
        if len(out_pad) != n:
            raise self.fail(node, f"output_padding has {len(out_pad)} values for {n} spatial dims")
        if any(not 0 <= p < max(s, d) for p, s, d in zip(out_pad, strides, dilations)):
            raise self.fail(node, f"output_padding {out_pad} must be >= 0 and below the strides {strides} "
                                  f"(or dilations {dilations})")
        target = node.attrs["output_shape"]
        if target is not None and len(target) < n:
            raise self.fail(node, f"output_shape {list(target)} has fewer than {n} values")
        full = [s * (i - 1) + p + (k - 1) * d + 1
                for s, i, p, k, d in zip(strides, in_sizes, out_pad, kernel, dilations)]
        auto_pad = node.attrs["auto_pad"] or "NOTSET"
        target = node.attrs["output_shape"]
        if target is not None:
            target = list(target)[-n:]
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = [i * s for i, s in zip(in_sizes, strides)]
        if target is not None:
            total = [f - t for f, t in zip(full, target)]
            small = [t // 2 for t in total]
            big = [t - t // 2 for t in total]
            pads = small + big if auto_pad == "SAME_UPPER" else big + small
            out = target
        else:
            pads = [0] * (2 * n) if auto_pad == "VALID" else list(node.attrs["pads"] or [0] * (2 * n))
            if len(pads) != 2 * n:
                raise self.fail(node, f"pads has {len(pads)} values, expected {2 * n}")
            out = [f - pads[i] - pads[i + n] for i, f in enumerate(full)]
        if any(o < 1 for o in out):
            raise self.fail(node, f"output sizes {out} are not positive")
        return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads, "out": out}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w = ins[0], ins[1]
        group = node.attrs["group"]
        if x.dtype != w.dtype:
            raise self.fail(node, f"X and W have different dtypes {x.dtype} and {w.dtype}")
        if x.shape is None:
            return [Info(x.dtype, None)]
        if len(x.shape) < 3:
            raise self.fail(node, f"input rank {len(x.shape)} is below 3")
        if w.shape is not None and len(w.shape) != len(x.shape):
            raise self.fail(node, f"input rank {len(x.shape)} and weight rank {len(w.shape)} do not form a "
                                  f"transposed convolution")
        m = None if w.shape is None else w.shape[1] * group
        if w.shape is not None and x.shape[1] is not None and w.shape[0] != x.shape[1]:
            raise self.fail(node, f"weight has {w.shape[0]} input channels; X has {x.shape[1]}")
        if not x.static or w.shape is None or not all(d is not None for d in w.shape):
            return [Info(x.dtype, (x.shape[0], m) + (None,) * (len(x.shape) - 2))]
        if x.shape[1] % group:
            raise self.fail(node, f"{x.shape[1]} channels do not split into {group} groups")
        g = self.geometry(node, x.shape, w.shape)
        return [Info(x.dtype, (x.shape[0], m, *g["out"]))]
