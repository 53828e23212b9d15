"""FLOPs and bytes per call of an operator, from the shapes the profiler recorded.

``torch.profiler(record_shapes=True)`` writes on each CPU op ``Input Dims`` (one list of sizes per
argument, ``[]`` for a non-tensor), ``Input type`` (``"c10::BFloat16"``, ``"float"``, ``"Scalar"``...)
and, since PyTorch 2.1, ``Concrete Inputs`` (scalar arguments as text: stride lists, ``"True"``).
:func:`model` turns one (op name, those three texts) into an :class:`OpModel`; an op with no
shapes, an op it has no formula for, or shapes that do not fit the formula give ``None``: "no
model", never a guess.

Conventions follow AMD's TraceLens ``PerfModel`` (so that an independent model agrees): a
multiply-add is 2 FLOPs, bytes are the minimum DRAM traffic (each input read once, each output
written once), element-wise ops count 1 FLOP per output element. Each formula sits next to its
code. Where perfreport deliberately differs from TraceLens it says so (bias terms counted when
the bias tensor is present; the convolution backward's ``output_mask`` honoured when recorded).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Callable

from .matrix_ops import (
    _sdpa, addmm, baddbmm, bmm, convolution, convolution_backward, cudnn_convolution_backward, linear, matmul, mm,
    scaled_mm,
)
from .memory_ops import (
    batch_norm, batch_norm_backward, copy, elementwise, fill, fused_add_rms_norm, group_norm, layer_norm,
    layer_norm_backward, reduction, rms_norm, softmax,
)
from .shapes import MATRIX_KINDS, OpModel, dtype_info

__all__ = ["MATRIX_KINDS", "MODELS", "OpModel", "dtype_info", "has_model", "model"]


# --- the registry ----------------------------------------------------------------------------------
_UNARY = ("relu", "gelu", "silu", "sigmoid", "tanh", "neg", "exp", "log", "rsqrt", "sqrt", "abs", "reciprocal",
          "clamp", "clamp_min", "clamp_max", "hardtanh", "leaky_relu", "elu", "erf", "sin", "cos", "pow",
          "square", "sign", "floor", "ceil", "round", "log1p", "expm1", "mish", "hardswish", "hardsigmoid",
          "logical_not", "bitwise_not", "nan_to_num")
_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "fmod",
           "remainder", "logical_and", "logical_or", "bitwise_and", "bitwise_or", "atan2", "lerp",
           "addcmul", "addcdiv", "where", "masked_fill", "threshold_backward", "gelu_backward", "silu_backward",
           "sigmoid_backward", "tanh_backward", "hardtanh_backward", "leaky_relu_backward", "_softmax_backward_data",
           "_log_softmax_backward_data", "mse_loss_backward")

MODELS: dict[str, Callable] = {
    "aten::mm": mm, "aten::addmm": addmm, "aten::_scaled_mm": scaled_mm, "aten::bmm": bmm,
    "aten::baddbmm": baddbmm, "aten::matmul": matmul, "aten::linear": linear,
    "aten::convolution": convolution, "aten::convolution_backward": convolution_backward,
    "aten::cudnn_convolution_backward": cudnn_convolution_backward,
    "aten::scaled_dot_product_attention": _sdpa(0, 5),
    "aten::_scaled_dot_product_flash_attention": _sdpa(0, 4),
    "aten::_scaled_dot_product_efficient_attention": _sdpa(0, 6),
    "aten::_scaled_dot_product_cudnn_attention": _sdpa(0, 6),
    "aten::_scaled_dot_product_flash_attention_backward": _sdpa(1, 11, backward=True),
    "aten::_scaled_dot_product_efficient_attention_backward": _sdpa(1, 11, backward=True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _sdpa(1, 14, backward=True),
    "aten::native_layer_norm": layer_norm, "aten::native_layer_norm_backward": layer_norm_backward,
    "aten::native_batch_norm": batch_norm, "aten::cudnn_batch_norm": batch_norm, "aten::miopen_batch_norm": batch_norm,
    "aten::native_batch_norm_backward": batch_norm_backward(1),
    "aten::cudnn_batch_norm_backward": batch_norm_backward(0),
    "aten::miopen_batch_norm_backward": batch_norm_backward(0), "aten::native_group_norm": group_norm,
    "aten::_fused_rms_norm": rms_norm, "_C::rms_norm": rms_norm, "_C::fused_add_rms_norm": fused_add_rms_norm,
    "aten::_softmax": softmax, "aten::_log_softmax": softmax,
    "aten::copy_": copy, "aten::fill_": fill, "aten::zero_": fill,
    **{f"aten::{op}": reduction for op in ("sum", "mean", "amax", "amin")},
    **{f"aten::{op}": elementwise(False) for op in _UNARY + _BINARY},
    **{f"aten::{op}_": elementwise(True) for op in _UNARY + _BINARY},
}
"""Op name -> formula. When ops nest, the innermost modelled op gets the kernels (see
:mod:`.op_efficiency`), so outer forms (``aten::linear``, ``aten::matmul``, the public
``scaled_dot_product_attention``) count only when nothing inside them is modelled."""


@lru_cache(maxsize=16384)
def model(name: str, dims_text: str, types_text: str, concrete_text: str = "") -> OpModel | None:
    """The :class:`OpModel` of one call, or None ("no model"): the op has no formula, its shapes
    were not recorded, or they do not fit (a formula never guesses a missing value)."""
    fn = MODELS.get(name)
    if fn is None or not dims_text or not types_text:
        return None
    try:
        dims, types = json.loads(dims_text), json.loads(types_text)
        concrete = json.loads(concrete_text) if concrete_text else None
        if not isinstance(dims, list) or not isinstance(types, list):
            return None
        result = fn(dims, types, concrete if isinstance(concrete, list) else None)
        flops, nbytes = float(result.flops), float(result.bytes)
    except Exception:  # untrusted trace text: any shape that does not fit is "no model", never a traceback
        return None
    if not (math.isfinite(flops) and math.isfinite(nbytes)) or nbytes <= 0 or flops < 0:
        return None
    return OpModel(result.kind, flops, nbytes, result.dtype)


def has_model(name: str) -> bool:
    """Whether ``name`` has a formula (its shapes may still not fit)."""
    return name in MODELS
