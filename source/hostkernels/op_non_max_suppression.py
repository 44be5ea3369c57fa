"""NonMaxSuppression on the CPU, vectorised over boxes and classes.

Per batch image the suppression relation (pairs of boxes with IoU above the threshold) is computed once,
for the boxes any class keeps, and shared by every class: a sweep over boxes sorted by their left edge
visits only pairs whose x-ranges overlap, in chunks of bounded size. Each class then runs the greedy
selection on that sparse relation in its own score order. Where even the x-overlapping pairs would be too
many (thousands of boxes piled on one spot), the image falls back to the greedy loop that computes one
IoU row per selected box, which is fast exactly then (few boxes survive). Both give the selection the
ONNX definition and onnxruntime give: IoU strictly above the threshold suppresses, degenerate boxes never
do, equal scores keep the lower box index first.
"""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn

# NOTE: x-overlapping candidate pairs evaluated per chunk (bounds the temporaries to ~200 MB), and in all
# per image before the sparse path gives way to the per-box loop.
PAIR_CHUNK = 1 << 22
PAIR_BUDGET = 1 << 25


def corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(ymin, xmin, ymax, xmax) of (boxes, 4) given as corners or as centers and sizes."""
    if center_point_box:
        xc, yc, w, h = boxes.T
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def suppresses(a: tuple[np.ndarray, ...], area_a: np.ndarray, b: tuple[np.ndarray, ...], area_b: np.ndarray,
               iou_threshold) -> np.ndarray:
    """Elementwise: does box a suppress box b (IoU strictly above the threshold; degenerate boxes never)."""
    ix = np.minimum(a[3], b[3]) - np.maximum(a[1], b[1])
    iy = np.minimum(a[2], b[2]) - np.maximum(a[0], b[0])
    inter = ix * iy
    union = area_a + area_b - inter
    valid = (ix > 0) & (iy > 0) & (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (inter / union > iou_threshold)


def overlap_pairs(edges: tuple[np.ndarray, ...], area: np.ndarray, iou_threshold) \
        -> tuple[np.ndarray, np.ndarray] | None:
    """Every pair (u, v), u != v, of boxes that suppress each other, or None past PAIR_BUDGET candidates.

    In left-edge order, box i can only overlap the ``count[i]`` boxes after it whose left edge is left of its
    right edge. Pairs (i, i + d) for d up to a depth D are taken a diagonal at a time on contiguous slices;
    the few boxes reaching further (wide boxes) have their remaining pairs gathered, in bounded chunks."""
    n = area.shape[0]
    by_x = np.argsort(edges[1], kind="stable")
    s = tuple(e[by_x] for e in edges) + (area[by_x],)
    end = np.searchsorted(s[1], s[3], side="left")
    count = np.maximum(end - np.arange(n) - 1, 0)
    if int(count.sum()) > PAIR_BUDGET:
        return None
    depth = _depth(count)
    us, vs = [], []
    for d in range(1, depth + 1):
        m = n - d
        hit = np.flatnonzero(suppresses(tuple(e[:m] for e in s[:4]), s[4][:m], tuple(e[d:] for e in s[:4]),
                                        s[4][d:], iou_threshold))
        us.append(hit)
        vs.append(hit + d)
    wide = np.flatnonzero(count > depth)
    rest = count[wide] - depth
    ends = np.cumsum(rest)
    start = 0
    while start < wide.shape[0]:
        base = int(ends[start - 1]) if start else 0
        stop = min(max(int(np.searchsorted(ends, base + PAIR_CHUNK, side="right")), start + 1), wide.shape[0])
        part = rest[start:stop]
        total = int(part.sum())
        rows = np.repeat(wide[start:stop], part)
        cols = rows + depth + 1 + (np.arange(total) - np.repeat(np.cumsum(part) - part, part))
        hit = suppresses(tuple(e[rows] for e in s[:4]), s[4][rows], tuple(e[cols] for e in s[:4]), s[4][cols],
                         iou_threshold)
        us.append(rows[hit])
        vs.append(cols[hit])
        start = stop
    if not us:
        return np.empty(0, np.intp), np.empty(0, np.intp)
    return by_x[np.concatenate(us)], by_x[np.concatenate(vs)]


def _depth(count: np.ndarray) -> int:
    """The diagonal depth D minimising n*D slice work plus the gathered pairs beyond it (costlier each)."""
    n = count.shape[0]
    top = int(count.max()) if n else 0
    ordered = np.sort(count)
    suffix = np.concatenate([np.cumsum(ordered[::-1])[::-1], [0]])
    best, best_cost = 0, None
    d = 0
    while True:
        at = int(np.searchsorted(ordered, d, side="right"))
        cost = n * d + 8 * (int(suffix[at]) - d * (n - at))
        if best_cost is None or cost < best_cost:
            best, best_cost = d, cost
        if d >= top:
            return best
        d = min(top, max(1, d * 2))


def select_sparse(u: np.ndarray, v: np.ndarray, candidates: np.ndarray, scores: np.ndarray, limit: int) -> np.ndarray:
    """Greedy selection of one class over the precomputed suppression pairs: box indices in selection order.

    ``candidates``: the box indices above the score threshold, ``scores``: the class's scores of all boxes."""
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    rank = np.full(scores.shape[0], -1, np.intp)
    rank[order] = np.arange(order.shape[0])
    ru, rv = rank[u], rank[v]
    both = (ru >= 0) & (rv >= 0)
    ru, rv = ru[both], rv[both]
    # each pair directed from the better-ranked box to the one it may suppress
    src, dst = np.minimum(ru, rv), np.maximum(ru, rv)
    by_src = np.argsort(src, kind="stable")
    src, dst = src[by_src], dst[by_src]
    alive = np.ones(order.shape[0], bool)
    if src.shape[0]:
        heads, starts = np.unique(src, return_index=True)
        stops = np.append(starts[1:], src.shape[0])
        # NOTE: ranks ascend, so every box that could suppress ``h`` has been decided before ``h`` is read.
        for h, a, b in zip(heads.tolist(), starts.tolist(), stops.tolist()):
            if alive[h]:
                alive[dst[a:b]] = False
    return order[np.flatnonzero(alive)[:limit]]


def select_dense(edges: tuple[np.ndarray, ...], area: np.ndarray, candidates: np.ndarray, scores: np.ndarray,
                 limit: int, iou_threshold) -> np.ndarray:
    """Greedy selection of one class, one IoU row per selected box (for piles of overlapping boxes)."""
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
        alive &= ~suppresses(tuple(e[k] for e in sub), sub_area[k], sub, sub_area, iou_threshold)
    return np.array(chosen, np.intp)


def select_image(boxes: np.ndarray, scores: np.ndarray, center: int, limit: int, iou_threshold,
                 score_threshold) -> list[np.ndarray]:
    """Per class of one batch image, the selected box indices in selection order."""
    classes, n = scores.shape
    if score_threshold is None:
        keep = np.ones((classes, n), bool)
    else:
        keep = scores > score_threshold
    wanted = np.flatnonzero(keep.any(axis=0))   # boxes some class may select
    edges = tuple(e[wanted] for e in corners(boxes, center))
    area = (edges[2] - edges[0]) * (edges[3] - edges[1])
    pairs = overlap_pairs(edges, area, iou_threshold) if limit > 0 else None
    picked = []
    for c in range(classes):
        if limit <= 0:
            picked.append(np.empty(0, np.intp))
            continue
        local = np.flatnonzero(keep[c, wanted])
        sub_scores = scores[c, wanted]
        if pairs is not None:
            chosen = select_sparse(pairs[0], pairs[1], local, sub_scores, limit)
        else:
            chosen = select_dense(edges, area, local, sub_scores, limit, iou_threshold)
        picked.append(wanted[chosen])
    return picked


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
            limit = int(min(max(int(_scalar(extra[0], 0)), 0), boxes.shape[1]))
            iou_threshold = _scalar(extra[1], boxes.dtype.type(0))
            score_threshold = _scalar(extra[2], None)
            parts = []
            for b in range(boxes.shape[0]):
                for c, chosen in enumerate(select_image(boxes[b], scores[b], center, limit, iou_threshold,
                                                        score_threshold)):
                    if chosen.size:
                        rows = np.empty((chosen.size, 3), np.int64)
                        rows[:, 0], rows[:, 1], rows[:, 2] = b, c, chosen
                        parts.append(rows)
            return (np.concatenate(parts) if parts else np.empty((0, 3), np.int64),)

        return run


IMPLEMENTATIONS = (NonMaxSuppressionKernel,)
