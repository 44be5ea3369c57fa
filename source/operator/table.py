"""The explicit table of operator prototypes: (domain, op_type) -> module.

One operator per module ``nnhal.operator.op_<snake_name>``, which defines a
Prototype subclass named like the op. Modules are imported on first use.
Adding an operator = adding its file and one line here.
"""
from __future__ import annotations

import importlib
from functools import lru_cache

from nnhal.operator.base import Prototype

ONNX_OPS: dict[str, str] = {
    # unary
    "Sqrt": "op_sqrt",
    "Exp": "op_exp",
    "Log": "op_log",
    "Neg": "op_neg",
    "Abs": "op_abs",
    "Reciprocal": "op_reciprocal",
    "Ceil": "op_ceil",
    "Floor": "op_floor",
    "Round": "op_round",
    "Sign": "op_sign",
    "Sin": "op_sin",
    "Cos": "op_cos",
    "Tan": "op_tan",
    "Asin": "op_asin",
    "Acos": "op_acos",
    "Atan": "op_atan",
    "Sinh": "op_sinh",
    "Cosh": "op_cosh",
    "Asinh": "op_asinh",
    "Acosh": "op_acosh",
    "Atanh": "op_atanh",
    "Erf": "op_erf",
    "Tanh": "op_tanh",
    "Sigmoid": "op_sigmoid",
    "Relu": "op_relu",
    "LeakyRelu": "op_leaky_relu",
    "Elu": "op_elu",
    "Selu": "op_selu",
    "Celu": "op_celu",
    "HardSigmoid": "op_hard_sigmoid",
    "HardSwish": "op_hard_swish",
    "Softplus": "op_softplus",
    "Softsign": "op_softsign",
    "ThresholdedRelu": "op_thresholded_relu",
    "Shrink": "op_shrink",
    "Mish": "op_mish",
    "Swish": "op_swish",
    "Gelu": "op_gelu",
    "PRelu": "op_prelu",
    "Clip": "op_clip",
    "IsInf": "op_is_inf",
    "IsNaN": "op_is_nan",
    "Not": "op_not",
    "BitwiseNot": "op_bitwise_not",
    "Identity": "op_identity",
    "Cast": "op_cast",
    "CastLike": "op_cast_like",
    "Dropout": "op_dropout",
    # binary
    "Add": "op_add",
    "Sub": "op_sub",
    "Mul": "op_mul",
    "Div": "op_div",
    "Pow": "op_pow",
    "Mod": "op_mod",
    "Max": "op_max",
    "Min": "op_min",
    "Sum": "op_sum",
    "Mean": "op_mean",
    "Equal": "op_equal",
    "Less": "op_less",
    "Greater": "op_greater",
    "LessOrEqual": "op_less_or_equal",
    "GreaterOrEqual": "op_greater_or_equal",
    "And": "op_and",
    "Or": "op_or",
    "Xor": "op_xor",
    "BitShift": "op_bit_shift",
    "BitwiseAnd": "op_bitwise_and",
    "BitwiseOr": "op_bitwise_or",
    "BitwiseXor": "op_bitwise_xor",
    "Where": "op_where",
    # shape
    "Shape": "op_shape",
    "Size": "op_size",
    "Reshape": "op_reshape",
    "Flatten": "op_flatten",
    "Squeeze": "op_squeeze",
    "Unsqueeze": "op_unsqueeze",
    "Transpose": "op_transpose",
    "Concat": "op_concat",
    "Split": "op_split",
    "Slice": "op_slice",
    "Gather": "op_gather",
    "GatherElements": "op_gather_elements",
    "GatherND": "op_gather_nd",
    "ScatterElements": "op_scatter_elements",
    "Scatter": "op_scatter",
    "ScatterND": "op_scatter_nd",
    "Expand": "op_expand",
    "Tile": "op_tile",
    "Pad": "op_pad",
    "ConstantOfShape": "op_constant_of_shape",
    "Constant": "op_constant",
    "Range": "op_range",
    "OneHot": "op_one_hot",
    "EyeLike": "op_eye_like",
    "Trilu": "op_trilu",
    "DepthToSpace": "op_depth_to_space",
    "SpaceToDepth": "op_space_to_depth",
    "Compress": "op_compress",
    "NonZero": "op_non_zero",
    "Unique": "op_unique",
    "TopK": "op_top_k",
    "ReverseSequence": "op_reverse_sequence",
    "CenterCropPad": "op_center_crop_pad",
    # nn
    "Conv": "op_conv",
    "ConvTranspose": "op_conv_transpose",
    "MaxPool": "op_max_pool",
    "AveragePool": "op_average_pool",
    "LpPool": "op_lp_pool",
    "GlobalAveragePool": "op_global_average_pool",
    "GlobalMaxPool": "op_global_max_pool",
    "GlobalLpPool": "op_global_lp_pool",
    "MaxUnpool": "op_max_unpool",
    "BatchNormalization": "op_batch_normalization",
    "InstanceNormalization": "op_instance_normalization",
    "LayerNormalization": "op_layer_normalization",
    "GroupNormalization": "op_group_normalization",
    "RMSNormalization": "op_rms_normalization",
    "LpNormalization": "op_lp_normalization",
    "MeanVarianceNormalization": "op_mean_variance_normalization",
    "LRN": "op_lrn",
    "Gemm": "op_gemm",
    "MatMul": "op_matmul",
    "Einsum": "op_einsum",
    "Resize": "op_resize",
    "Upsample": "op_upsample",
    "GridSample": "op_grid_sample",
    "AffineGrid": "op_affine_grid",
    "RoiAlign": "op_roi_align",
    "Col2Im": "op_col2im",
    "DeformConv": "op_deform_conv",
    # reduce
    "ReduceMax": "op_reduce_max",
    "ReduceMin": "op_reduce_min",
    "ReduceSum": "op_reduce_sum",
    "ReduceMean": "op_reduce_mean",
    "ReduceProd": "op_reduce_prod",
    "ReduceL1": "op_reduce_l1",
    "ReduceL2": "op_reduce_l2",
    "ReduceLogSum": "op_reduce_log_sum",
    "ReduceLogSumExp": "op_reduce_log_sum_exp",
    "ReduceSumSquare": "op_reduce_sum_square",
    "ArgMax": "op_arg_max",
    "ArgMin": "op_arg_min",
    "Softmax": "op_softmax",
    "LogSoftmax": "op_log_softmax",
    "Hardmax": "op_hardmax",
    "CumSum": "op_cum_sum",
    "CumProd": "op_cum_prod",
    "NegativeLogLikelihoodLoss": "op_negative_log_likelihood_loss",
    "SoftmaxCrossEntropyLoss": "op_softmax_cross_entropy_loss",
    "Det": "op_det",
    "DFT": "op_dft",
    "STFT": "op_stft",
    "HannWindow": "op_hann_window",
    "HammingWindow": "op_hamming_window",
    "BlackmanWindow": "op_blackman_window",
    "MelWeightMatrix": "op_mel_weight_matrix",
    "Attention": "op_attention",
    "RotaryEmbedding": "op_rotary_embedding",
    "NonMaxSuppression": "op_non_max_suppression",
    # quant
    "QuantizeLinear": "op_quantize_linear",
    "DequantizeLinear": "op_dequantize_linear",
    "DynamicQuantizeLinear": "op_dynamic_quantize_linear",
    "QLinearMatMul": "op_qlinear_matmul",
    "QLinearConv": "op_qlinear_conv",
    "MatMulInteger": "op_matmul_integer",
    "ConvInteger": "op_conv_integer",
    "RNN": "op_rnn",
    "LSTM": "op_lstm",
    "GRU": "op_gru",
    "If": "op_if",
    "Loop": "op_loop",
    "Scan": "op_scan",}

# The quantized operators of the com.microsoft domain that onnxruntime's quantization tool writes
# (QOperator format) and nnhal's own int8/uint8 CPU path uses; the float attention ops its transformer
# optimizer writes.
MS_OPS: dict[str, str] = {
    "QLinearAdd": "ms_qlinear_add",
    "QLinearMul": "ms_qlinear_mul",
    "QLinearConcat": "ms_qlinear_concat",
    "QLinearGlobalAveragePool": "ms_qlinear_global_average_pool",
    "QLinearSoftmax": "ms_qlinear_softmax",
    "QLinearAveragePool": "ms_qlinear_average_pool",
    "QGemm": "ms_qgemm",
    "DynamicQuantizeLSTM": "ms_dynamic_quantize_lstm",
    "MatMulIntegerToFloat": "ms_matmul_integer_to_float",
    "DynamicQuantizeMatMul": "ms_dynamic_quantize_matmul",
    "QAttention": "ms_qattention",
    "Attention": "ms_attention",
    "MultiHeadAttention": "ms_multi_head_attention",
}

# nnhal's own operators (what its passes write; no onnx file carries them)
NNHAL_OPS: dict[str, str] = {
    "DynamicQuantizeGemm": "nn_dynamic_quantize_gemm",
    "CodeTable": "nn_code_table",
}

TABLE: dict[str, dict[str, str]] = {"": ONNX_OPS, "ai.onnx": ONNX_OPS, "com.microsoft": MS_OPS, "ai.nnhal": NNHAL_OPS}


@lru_cache(maxsize=None)
def get_prototype(domain: str, op_type: str) -> Prototype | None:
    """The prototype of an operator, or None when nnhal does not know it."""
    module_name = TABLE.get(domain, {}).get(op_type)
    if module_name is None:
        return None
    module = importlib.import_module(f"nnhal.operator.{module_name}")
    return getattr(module, op_type)()


def known_ops(domain: str = "") -> list[str]:
    """Operator types with a prototype, sorted."""
    return sorted(TABLE.get(domain, {}))
