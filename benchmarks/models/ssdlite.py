"""SSDlite320-MobileNetV3-large (torchvision.models.detection.ssdlite320_mobilenet_v3_large): the backbone
with its C4 tap, four depthwise-separable extra blocks, depthwise-separable heads over six feature maps,
3234 default boxes, box decoding and softmax scores. ``postprocess`` appends the detection graph torchvision
exports: per-class top-300 candidates, batched NMS by the coordinate-offset trick inside an If (the scripted
``boxes.numel() == 0`` branch) and the per-image cap of 300 detections."""
from __future__ import annotations

import math

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from .mobilenetv3 import LARGE, InvertedResidual, conv_bn_act

CLASSES, CANDIDATES, DETECTIONS, IOU, SCORE = 91, 300, 300, 0.55, 0.001


def separable(cin: int, cout: int, stride: int = 1, final: bool = False) -> nn.Sequential:
    dw = conv_bn_act(cin, cin, 3, stride, groups=cin, act=nn.ReLU6)
    if final:
        return nn.Sequential(dw, nn.Conv2d(cin, cout, 1))
    return nn.Sequential(dw, conv_bn_act(cin, cout, 1, act=nn.ReLU6))


def extra(cin: int, cout: int) -> nn.Sequential:
    mid = cout // 2
    return nn.Sequential(conv_bn_act(cin, mid, 1, act=nn.ReLU6), conv_bn_act(mid, mid, 3, 2, groups=mid, act=nn.ReLU6),
                         conv_bn_act(mid, cout, 1, act=nn.ReLU6))


def default_boxes(sizes=(20, 10, 5, 3, 2, 1), min_ratio: float = 0.2, max_ratio: float = 0.95) -> np.ndarray:
    """torchvision's DefaultBoxGenerator([[2, 3]] * 6) as (cx, cy, w, h), clipped, in [0, 1]."""
    m = len(sizes)
    scales = [min_ratio + (max_ratio - min_ratio) * k / (m - 1) for k in range(m)] + [1.0]
    out = []
    for k, f in enumerate(sizes):
        s, s2 = scales[k], math.sqrt(scales[k] * scales[k + 1])
        wh = [(s, s), (s2, s2)]
        for r in (2, 3):
            q = math.sqrt(r)
            wh += [(s * q, s / q), (s / q, s * q)]
        for y in range(f):
            for x in range(f):
                for w, h in wh:
                    out.append(((x + 0.5) / f, (y + 0.5) / f, min(w, 1.0), min(h, 1.0)))
    return np.array(out, np.float32)


class SSDLite(nn.Module):
    def __init__(self, size: int = 320):
        super().__init__()
        blocks = [conv_bn_act(3, 16, 3, 2)] + [InvertedResidual(*c) for c in LARGE]
        tap = blocks[13].block   # C4: the expansion of the first stride-2 160-channel block
        self.stage1 = nn.Sequential(*blocks[:13], tap[0])
        self.stage2 = nn.Sequential(*list(tap)[1:], *blocks[14:], conv_bn_act(160, 960, 1))
        self.extras = nn.ModuleList([extra(960, 512), extra(512, 256), extra(256, 256), extra(256, 128)])
        channels = (672, 960, 512, 256, 256, 128)
        self.cls = nn.ModuleList([separable(c, 6 * CLASSES, final=True) for c in channels])
        self.reg = nn.ModuleList([separable(c, 6 * 4, final=True) for c in channels])
        self.register_buffer("anchors", torch.from_numpy(default_boxes()) * size)
        self.size = size

    def forward(self, x):
        f = [self.stage1(x)]
        f.append(self.stage2(f[0]))
        for e in self.extras:
            f.append(e(f[-1]))
        b = x.shape[0]
        logits = torch.cat([h(t).permute(0, 2, 3, 1).reshape(b, -1, CLASSES) for h, t in zip(self.cls, f)], 1)
        deltas = torch.cat([h(t).permute(0, 2, 3, 1).reshape(b, -1, 4) for h, t in zip(self.reg, f)], 1)
        a = self.anchors
        cx = deltas[..., 0] / 10 * a[:, 2] + a[:, 0]
        cy = deltas[..., 1] / 10 * a[:, 3] + a[:, 1]
        w = torch.exp(torch.clamp(deltas[..., 2] / 5, max=math.log(1000 / 16))) * a[:, 2]
        h = torch.exp(torch.clamp(deltas[..., 3] / 5, max=math.log(1000 / 16))) * a[:, 3]
        boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1).clamp(0, self.size)
        return boxes, torch.softmax(logits, -1)


def postprocess(model, anchors: int):
    """Append the detection post-processing to the exported (boxes, scores) model, in place: outputs
    det_boxes (K, 4), det_scores (K,), det_labels (K,), det_batch (K,)."""
    g = model.graph
    boxes, scores = g.output[0].name, g.output[1].name
    k = min(CANDIDATES, anchors)
    labels = np.repeat(np.arange(1, CLASSES, dtype=np.int64), k)
    consts = {"pp_starts": [1], "pp_ends": [CLASSES], "pp_axes1": [1], "pp_k": [k], "pp_flat3": [0, -1, 1],
              "pp_flat1": [0, 1, -1], "pp_flat2": [0, -1], "pp_zero": 0, "pp_one": 1,
              "pp_maxout": [2**63 - 1], "pp_cap": DETECTIONS, "pp_ax1": [1], "pp_cols": [0, 2], "pp_col2": 2,
              "pp_col0": 0}
    for name, v in consts.items():
        g.initializer.append(numpy_helper.from_array(np.array(v, np.int64), name))
    g.initializer.append(numpy_helper.from_array(labels, "pp_labels"))
    g.initializer.append(numpy_helper.from_array(labels.astype(np.float32).reshape(1, -1, 1), "pp_labels_f"))
    g.initializer.append(numpy_helper.from_array(np.array([IOU], np.float32), "pp_iou"))
    g.initializer.append(numpy_helper.from_array(np.array([SCORE], np.float32), "pp_score"))
    g.initializer.append(numpy_helper.from_array(np.array(1, np.float32), "pp_onef"))
    n = helper.make_node
    nms_body = helper.make_graph(
        [n("NonMaxSuppression", ["pp_shifted", "pp_sflat", "pp_maxout", "pp_iou", "pp_score"], ["pp_sel_e"])],
        "nms_branch", [], [helper.make_tensor_value_info("pp_sel_e", TensorProto.INT64, [None, 3])])
    empty_body = helper.make_graph(
        [n("Constant", [], ["pp_sel_t"], value=numpy_helper.from_array(np.zeros((0, 3), np.int64)))],
        "empty_branch", [], [helper.make_tensor_value_info("pp_sel_t", TensorProto.INT64, [None, 3])])
    g.node.extend([
        n("Transpose", [scores], ["pp_st"], perm=[0, 2, 1]),
        n("Slice", ["pp_st", "pp_starts", "pp_ends", "pp_axes1"], ["pp_sc"]),
        n("TopK", ["pp_sc", "pp_k"], ["pp_vals", "pp_idx"], axis=-1),
        n("Reshape", ["pp_idx", "pp_flat3"], ["pp_idx3"]),
        n("GatherND", [boxes, "pp_idx3"], ["pp_cand"], batch_dims=1),
        n("ReduceMax", [boxes], ["pp_maxc"], axes=[1, 2], keepdims=1),
        n("Add", ["pp_maxc", "pp_onef"], ["pp_maxc1"]),
        n("Mul", ["pp_labels_f", "pp_maxc1"], ["pp_off"]),
        n("Add", ["pp_cand", "pp_off"], ["pp_shifted"]),
        n("Reshape", ["pp_vals", "pp_flat1"], ["pp_sflat"]),
        n("Size", ["pp_cand"], ["pp_numel"]),
        n("Equal", ["pp_numel", "pp_zero"], ["pp_isempty"]),
        n("If", ["pp_isempty"], ["pp_sel"], then_branch=empty_body, else_branch=nms_body),
        # the per-image cap: rank of each selection within its image (rows come grouped by image, best first)
        n("Gather", ["pp_sel", "pp_col0"], ["pp_b"], axis=1),
        n("Shape", [boxes], ["pp_shape"]),
        n("Gather", ["pp_shape", "pp_zero"], ["pp_nb"]),
        n("Range", ["pp_zero", "pp_nb", "pp_one"], ["pp_images"]),
        n("Unsqueeze", ["pp_b", "pp_ax1"], ["pp_b1"]),
        n("Equal", ["pp_b1", "pp_images"], ["pp_hot_b"]),
        n("Cast", ["pp_hot_b"], ["pp_hot"], to=TensorProto.INT64),
        n("CumSum", ["pp_hot", "pp_zero"], ["pp_cum"]),
        n("GatherElements", ["pp_cum", "pp_b1"], ["pp_rank1"], axis=1),
        n("Squeeze", ["pp_rank1", "pp_ax1"], ["pp_rank"]),
        n("LessOrEqual", ["pp_rank", "pp_cap"], ["pp_keep"]),
        n("Compress", ["pp_sel", "pp_keep"], ["pp_kept"], axis=0),
        n("Gather", ["pp_kept", "pp_cols"], ["pp_bc"], axis=1),
        n("GatherND", ["pp_cand", "pp_bc"], ["det_boxes"]),
        n("Reshape", ["pp_vals", "pp_flat2"], ["pp_s2"]),
        n("GatherND", ["pp_s2", "pp_bc"], ["det_scores"]),
        n("Gather", ["pp_kept", "pp_col2"], ["pp_c"], axis=1),
        n("Gather", ["pp_labels", "pp_c"], ["det_labels"]),
        n("Gather", ["pp_kept", "pp_col0"], ["det_batch"], axis=1),
    ])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [None, 4]),
                     helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, [None]),
                     helper.make_tensor_value_info("det_labels", TensorProto.INT64, [None]),
                     helper.make_tensor_value_info("det_batch", TensorProto.INT64, [None])])
    return model
