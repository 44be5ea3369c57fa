"""Where OpenVINO says yes and computes something else: nodes the device declines although query_model
accepts them, each with the reason and the conformance case that showed it (``nnhal validate --device
openvino`` with OpenVINO 2026.4 on the CPU plugin). Small ``return reason`` guards, one per op, registered
by op name; a rule is removed when a newer OpenVINO passes its cases.
"""
from __future__ import annotations

from collections.abc import Callable

from nnhal.device.device import Candidate


def _tile(c: Candidate) -> str | None:
    if len(c.inputs) > 1 and c.inputs[1] is not None and c.inputs[1].value is None:
        return "OpenVINO computes Tile with repeats known only at run time wrongly (test_tile)"
    return None


def _resize(c: Candidate) -> str | None:
    a = c.node.attrs
    if a.get("mode") == "cubic":
        return "OpenVINO's cubic Resize differs from ONNX's (test_resize_*_cubic_*)"
    if a.get("antialias"):
        return "OpenVINO's antialiased Resize differs from ONNX's (test_resize_*_antialias)"
    if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "OpenVINO sizes Resize with keep_aspect_ratio_policy otherwise than ONNX (test_resize_*_not_larger)"
    if a.get("mode") == "linear" and a.get("coordinate_transformation_mode") == "align_corners":
        return "OpenVINO's linear align_corners Resize differs from ONNX's when downsampling " \
               "(test_resize_downsample_scales_linear_align_corners)"
    return None


def _roi_align(c: Candidate) -> str | None:
    if c.node.attrs.get("mode") == "max":
        return "OpenVINO's RoiAlign mode=max differs from ONNX's (test_roialign_mode_max)"
    return None


def _reduce_extreme(c: Candidate) -> str | None:
    x = c.inputs[0] if c.inputs else None
    if x is not None and x.shape is not None and 0 in x.shape:
        return "OpenVINO reduces an empty set otherwise than ONNX (-inf / +inf) (test_reduce_max_empty_set)"
    if x is not None and (x.dtype is None or x.dtype.kind == "f"):
        return "OpenVINO's float ReduceMax / ReduceMin give -3.4e38 for a row of -inf and drop NaNs " \
               "(test_attention_*_nan_robustness_expanded)"
    return None


def _space_to_depth(c: Candidate) -> str | None:
    if str(c.node.attrs.get("mode", "DCR")).upper() == "CRD":
        return "OpenVINO's ONNX frontend reads SpaceToDepth mode=CRD as DCR (test_spacetodepth_crd_mode_example)"
    return None


def _pool(c: Candidate) -> str | None:
    a, x = c.node.attrs, c.inputs[0] if c.inputs else None
    if not a.get("ceil_mode") or x is None or x.shape is None or a.get("auto_pad", "NOTSET") != "NOTSET":
        return None
    kernel = list(a.get("kernel_shape") or [])
    n = len(kernel)
    strides = list(a.get("strides") or [1] * n)
    dilations = list(a.get("dilations") or [1] * n)
    pads = list(a.get("pads") or [0] * 2 * n)
    for i, size in enumerate(x.shape[2:]):
        if size is None:
            return "ceil_mode with a spatial size unknown before the run (OpenVINO may keep one window more)"
        span = (kernel[i] - 1) * dilations[i] + 1
        out = -(-(size + pads[i] + pads[i + n] - span) // strides[i]) + 1
        if (out - 1) * strides[i] >= size + pads[i]:
            return "OpenVINO keeps the last ceil_mode window that starts in the padding; ONNX drops it " \
                   "(test_maxpool_2d_ceil_output_size_reduce_by_one)"
    return None


def _lstm(c: Candidate) -> str | None:
    if len(c.node.inputs) > 7 and c.node.inputs[7]:
        return "OpenVINO's LSTM with peepholes (input P) differs from ONNX's (test_lstm_with_peepholes)"
    return None


def _always(reason: str) -> Callable[[Candidate], str]:
    return lambda c: reason


RULES: dict[str, Callable[[Candidate], str | None]] = {
    "Tile": _tile,
    "LSTM": _lstm,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "Resize": _resize,
    "RoiAlign": _roi_align,
    "ReduceMax": _reduce_extreme,
    "ReduceMin": _reduce_extreme,
    "QuantizeLinear": _always("OpenVINO rounds some halfway values of QuantizeLinear otherwise than ONNX's round "
                              "half to even (test_dynamicquantizelinear_expanded, test_quantizelinear_uint16)"),
    "SpaceToDepth": _space_to_depth,
    "TopK": _always("OpenVINO orders equal values otherwise than ONNX (lower index first) (test_top_k_same_values)"),
    "BitShift": _always("OpenVINO shifts by the width or more, or negative values, otherwise than ONNX "
                        "(test_bitshift_*)"),
    "NonMaxSuppression": _always("OpenVINO keeps boxes at exactly the IoU threshold otherwise than ONNX "
                                 "(test_nonmaxsuppression_iou_threshold_boundary)"),
    "DFT": _always("OpenVINO's DFT differs by up to 1e-4 absolute on O(1) inputs (test_dft_opset19)"),
    "DynamicQuantizeLinear": _always("OpenVINO rounds the zero point otherwise than ONNX (test_dynamicquantizelinear)"),
    "Attention": _always("OpenVINO's Attention (opset 23/24) differs from ONNX's with windows, past keys and "
                         "bias masks (test_attention_local_window, ..._with_past_and_present_*)"),
}


def why_not(candidate: Candidate) -> str | None:
    """The reason OpenVINO must not take this node although its query accepts it, or None."""
    if candidate.node.domain not in ("", "ai.onnx"):
        return None
    rule = RULES.get(candidate.node.op_type)
    return rule(candidate) if rule is not None else None
