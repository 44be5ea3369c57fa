"""NonMaxSuppression on the CPU: one vectorized IoU row per selected box."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn


def corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(ymin, xmin, ymax, xmax) of (boxes, 4) given as corners or as centers and sizes."""
    if center_point_box:
        xc, yc, w, h = boxes.T
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def overlaps(edges: tuple[np.ndarray, ...], area: np.ndarray, k: int, iou_threshold) -> np.ndarray:
    """Which boxes box ``k`` suppresses: IoU strictly above the threshold (degenerate boxes never)."""
    ymin, xmin, ymax, xmax = edges
    ix = np.minimum(xmax[k], xmax) - np.maximum(xmin[k], xmin)
    iy = np.minimum(ymax[k], ymax) - np.maximum(ymin[k], ymin)
    inter = ix * iy
    union = area[k] + area - inter
    valid = (ix > 0) & (iy > 0) & (inter > 0) & (area[k] > 0) & (area > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (inter / union > iou_threshold)


def select_class(edges: tuple[np.ndarray, ...], area: np.ndarray, scores: np.ndarray, limit: int,
                 iou_threshold, score_threshold) -> list[int]:
    """Greedy selection for one (batch, class): box indices in selection order."""
    candidates = np.arange(scores.shape[0])
    if score_threshold is not None:
        candidates = candidates[scores > score_threshold]
    # NOTE: a stable sort on -score keeps lower box indices first among equal scores.
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    alive = np.ones(order.shape[0], bool)
    chosen: list[int] = []
    sub = tuple(e[order] for e in edges)
    sub_area = area[order]
    while len(chosen) < limit:
        remaining = np.flatnonzero(alive)
        if remaining.size == 0:
            break
        k = remaining[0]
        chosen.append(int(order[k]))
        alive[k] = False
        alive &= ~overlaps(sub, sub_area, k, iou_threshold)
    return chosen


def _scalar(value: np.ndarray | None, default):
    if value is None or np.asarray(value).size == 0:
        return default
    return np.asarray(value).ravel()[0]


class NonMaxSuppressionKernel(Kernel):
    op_type = "NonMaxSuppression"

    def prepare(self, node, ins, outs) -> RunFn:
        center = node.attrs["center_point_box"]

        def run(inputs, outputs):
            boxes, scores = inputs[0], inputs[1]
            extra = list(inputs[2:5]) + [None] * (5 - len(inputs))
            limit = max(int(_scalar(extra[0], 0)), 0)
            iou_threshold = _scalar(extra[1], boxes.dtype.type(0))
            score_threshold = _scalar(extra[2], None)
            rows: list[tuple[int, int, int]] = []
            for b in range(boxes.shape[0]):
                edges = corners(boxes[b], center)
                area = (edges[2] - edges[0]) * (edges[3] - edges[1])
                for c in range(scores.shape[1]):
                    picked = select_class(edges, area, scores[b, c], limit, iou_threshold, score_threshold)
                    rows.extend((b, c, i) for i in picked)
            return (np.array(rows, dtype=np.int64).reshape(-1, 3),)

        return run


IMPLEMENTATIONS = (NonMaxSuppressionKernel,)
