"""RoiAlign on the CPU: per ROI, bins as separable interpolation matrices (avg) or corner maxima (max)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store


def _axis(start: float, bin_size: float, bins: int, grid: int, size: int) -> tuple:
    """Sample taps along one axis: low, high, weights of low/high (0 outside), shaped (bins, grid)."""
    c = start + np.arange(bins)[:, None] * bin_size + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    valid = (c >= -1.0) & (c <= size)
    c = np.maximum(c, 0.0)
    low = np.floor(c).astype(np.int64)
    end = low >= size - 1
    low = np.where(end, size - 1, low)
    high = np.where(end, size - 1, low + 1)
    c = np.where(end, low, c)
    frac = c - low
    return low, high, (1 - frac) * valid, frac * valid


def _matrix(low, high, w_low, w_high, size: int) -> np.ndarray:
    """Interpolation matrix (bins, grid, size)."""
    pos = np.arange(size)
    return w_low[..., None] * (pos == low[..., None]) + w_high[..., None] * (pos == high[..., None])


class RoiAlignKernel(Kernel):
    op_type = "RoiAlign"

    def prepare(self, node, ins, outs) -> RunFn:
        a = node.attrs
        out_h, out_w = int(a["output_height"]), int(a["output_width"])
        scale, ratio = float(a["spatial_scale"]), int(a["sampling_ratio"])
        half = a["coordinate_transformation_mode"] == "half_pixel"
        use_max = a["mode"] == "max"
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, rois, batch = inputs
            c, h, w = x.shape[1:]
            y = np.zeros((rois.shape[0], c, out_h, out_w), dtype=np.float64)
            for r in range(rois.shape[0]):
                off = 0.5 if half else 0.0
                x0, y0, x1, y1 = (float(v) * scale - off for v in rois[r])
                rw, rh = x1 - x0, y1 - y0
                if not half:
                    rw, rh = max(rw, 1.0), max(rh, 1.0)
                gh = ratio if ratio > 0 else int(np.ceil(rh / out_h))
                gw = ratio if ratio > 0 else int(np.ceil(rw / out_w))
                if gh <= 0 or gw <= 0:
                    continue
                ay = _axis(y0, rh / out_h, out_h, gh, h)
                ax = _axis(x0, rw / out_w, out_w, gw, w)
                img = x[int(batch[r])].astype(np.float64)
                if use_max:
                    y[r] = _max_bins(img, ay, ax, out_h, gh, out_w, gw)
                else:
                    my = _matrix(*ay, h).sum(axis=1)
                    mx = _matrix(*ax, w).sum(axis=1)
                    y[r] = my @ img @ mx.T / (gh * gw)
            return (store(y, outputs[0], dtype),)

        return run


def _max_bins(img, ay, ax, out_h: int, gh: int, out_w: int, gw: int) -> np.ndarray:
    """Max over samples of the largest weighted corner (onnxruntime's max mode)."""
    best = None
    for yi, wy in ((ay[0], ay[2]), (ay[1], ay[3])):
        for xi, wx in ((ax[0], ax[2]), (ax[1], ax[3])):
            v = img[:, yi.reshape(-1)][:, :, xi.reshape(-1)] * (wy.reshape(-1, 1) * wx.reshape(1, -1))
            best = v if best is None else np.maximum(best, v)
    return best.reshape(img.shape[0], out_h, gh, out_w, gw).max(axis=(2, 4))


IMPLEMENTATIONS = (RoiAlignKernel,)
