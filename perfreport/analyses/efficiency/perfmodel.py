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
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

# --- dtypes ---------------------------------------------------------------------------------------
_DTYPES = {
    "double": ("fp64", 8), "float": ("fp32", 4), "c10::half": ("fp16", 2), "c10::bfloat16": ("bf16", 2),
    "c10::float8_e4m3fn": ("fp8", 1), "c10::float8_e5m2": ("fp8", 1), "c10::float8_e4m3fnuz": ("fp8", 1),
    "c10::float8_e5m2fnuz": ("fp8", 1), "c10::float8_e8m0fnu": ("fp8", 1), "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1), "short int": ("int16", 2), "int": ("int32", 4), "long int": ("int64", 8),
    "long": ("int64", 8), "bool": ("bool", 1), "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}
"""Profiler dtype names (lower-cased) -> (short name, bytes per element)."""


def dtype_info(name: str) -> tuple[str, int] | None:
    """(short name, bytes per element) of a profiler dtype name; None for non-tensors
    ("Scalar", "ScalarList", "") and unknown names."""
    return _DTYPES.get(name.strip().lower())


@dataclass(frozen=True, slots=True)
class OpModel:
    """FLOPs and bytes of one call. ``kind``: gemm, conv, attention (matrix ops: tensor-core
    eligible) or elementwise, norm, reduce, copy (vector ops). ``dtype``: the short dtype name
    the FLOPs run in ("bf16", "fp32", ...)."""

    kind: str
    flops: float
    bytes: float
    dtype: str

    @property
    def matrix(self) -> bool:
        return self.kind in MATRIX_KINDS


MATRIX_KINDS = ("gemm", "conv", "attention")


class _NoModel(Exception):
    """The recorded arguments do not fit the formula."""


def _prod(shape) -> int:
    return math.prod(int(x) for x in shape)


def _tensor(dims: list, types: list, i: int) -> tuple[list[int], str, int]:
    """(shape, dtype short name, bytes per element) of argument ``i``; _NoModel if not a tensor."""
    if i >= len(dims) or i >= len(types) or not isinstance(dims[i], list):
        raise _NoModel
    info = dtype_info(types[i]) if isinstance(types[i], str) else None
    shape = dims[i]
    if info is None or not all(isinstance(x, int) for x in shape):
        raise _NoModel
    return shape, info[0], info[1]


def _present(dims: list, i: int) -> bool:
    """An optional tensor argument was passed (a non-empty size list)."""
    return i < len(dims) and isinstance(dims[i], list) and len(dims[i]) > 0


def _concrete(concrete: list | None, i: int) -> str | None:
    if concrete is None or i >= len(concrete) or not isinstance(concrete[i], str) or concrete[i] == "":
        return None
    return concrete[i]


def _int_list(text: str | None, n: int, default: int) -> list[int]:
    """A stride/padding list ("[2, 2]", "[1]") expanded to ``n`` dims; ``default`` when absent."""
    if text is None:
        return [default] * n
    values = [int(x) for x in text.strip("[]() ").replace(" ", "").split(",") if x != ""]
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        raise _NoModel
    return values


def _bool(text: str | None) -> bool | None:
    if text is None:
        return None
    return {"true": True, "false": False, "1": True, "0": False}.get(text.strip().lower())


# --- GEMM -----------------------------------------------------------------------------------------
def _gemm(batch: int, m: int, n: int, k: int, bias: bool, bpe_a: int, bpe_b: int, bpe_out: int,
          dtype: str) -> OpModel:
    """FLOPs = batch × (2·M·N·K + M·N if bias); bytes = batch × (M·K·a + K·N·b + M·N·out + N·out if
    bias): the GEMM convention of TraceLens (bias read as a row of N)."""
    flops = batch * (2 * m * n * k + (m * n if bias else 0))
    nbytes = batch * (m * k * bpe_a + k * n * bpe_b + m * n * bpe_out + (n * bpe_out if bias else 0))
    return OpModel("gemm", flops, nbytes, dtype)


def mm(dims, types, concrete) -> OpModel:
    """aten::mm(A[M,K], B[K,N])."""
    (m, k), dt, bpe = _2d(dims, types, 0)
    (_, n), _, bpe_b = _2d(dims, types, 1)
    return _gemm(1, m, n, k, False, bpe, bpe_b, bpe, dt)


def addmm(dims, types, concrete) -> OpModel:
    """aten::addmm(C, A[M,K], B[K,N]): + M·N FLOPs for adding C."""
    (m, k), dt, bpe = _2d(dims, types, 1)
    (_, n), _, bpe_b = _2d(dims, types, 2)
    return _gemm(1, m, n, k, True, bpe, bpe_b, bpe, dt)


def scaled_mm(dims, types, concrete) -> OpModel:
    """aten::_scaled_mm(A[M,K], B[K,N], scale_a, scale_b, bias?, ...): FP8 inputs write a 16-bit
    output (TraceLens' convention; the out_dtype argument is not recorded as a shape)."""
    (m, k), dt, bpe = _2d(dims, types, 0)
    (_, n), _, bpe_b = _2d(dims, types, 1)
    out = 2 if bpe == 1 else bpe
    return _gemm(1, m, n, k, _present(dims, 4), bpe, bpe_b, out, dt)


def bmm(dims, types, concrete) -> OpModel:
    """aten::bmm(A[B,M,K], B[B,K,N])."""
    (b, m, k), dt, bpe = _nd(dims, types, 0, 3)
    (_, _, n), _, bpe_b = _nd(dims, types, 1, 3)
    return _gemm(b, m, n, k, False, bpe, bpe_b, bpe, dt)


def baddbmm(dims, types, concrete) -> OpModel:
    """aten::baddbmm(C, A[B,M,K], B[B,K,N])."""
    (b, m, k), dt, bpe = _nd(dims, types, 1, 3)
    (_, _, n), _, bpe_b = _nd(dims, types, 2, 3)
    return _gemm(b, m, n, k, True, bpe, bpe_b, bpe, dt)


def matmul(dims, types, concrete) -> OpModel:
    """aten::matmul(A[..., M, K], B[..., K, N]) with broadcast batch dims; a 1-d operand is a
    vector (M or N = 1). Only reached when no inner mm/bmm was recorded."""
    a, dt, bpe = _tensor(dims, types, 0)
    b, _, bpe_b = _tensor(dims, types, 1)
    if not a or not b:
        raise _NoModel
    a2 = [1] + a if len(a) == 1 else a
    b2 = b + [1] if len(b) == 1 else b
    batch = _broadcast(a2[:-2], b2[:-2])
    return _gemm(_prod(batch), a2[-2], b2[-1], a2[-1], False, bpe, bpe_b, bpe, dt)


def linear(dims, types, concrete) -> OpModel:
    """aten::linear(x[..., K], W[N, K], bias?): M = product of x's leading dims. Only reached when
    no inner addmm/mm was recorded."""
    x, dt, bpe = _tensor(dims, types, 0)
    (n, k), _, bpe_w = _2d(dims, types, 1)
    if not x or x[-1] != k:
        raise _NoModel
    return _gemm(1, _prod(x[:-1]), n, k, _present(dims, 2), bpe, bpe_w, bpe, dt)


def _2d(dims, types, i):
    return _nd(dims, types, i, 2)


def _nd(dims, types, i, n):
    shape, dt, bpe = _tensor(dims, types, i)
    if len(shape) != n:
        raise _NoModel
    return shape, dt, bpe


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise _NoModel
    return [max(x, y) for x, y in zip(a, b)]


# --- convolution ----------------------------------------------------------------------------------
def _conv_out(x: list[int], w: list[int], stride, padding, dilation, transposed: bool, out_pad) -> list[int]:
    """Output shape of a (transposed) convolution; weight is [Cout, Cin/g, k...] ([Cin, Cout/g, k...]
    transposed)."""
    spatial = []
    for i, size in enumerate(x[2:]):
        k = w[2 + i]
        if transposed:
            spatial.append((size - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + out_pad[i] + 1)
        else:
            spatial.append((size + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1)
    if any(s <= 0 for s in spatial):
        raise _NoModel
    return [x[0], w[0] if not transposed else w[1]] + spatial


def _conv_flops(x, w, out, transposed: bool) -> int:
    """2 · (elements that each see the whole filter) · prod(w[1:]): output elements for a
    convolution, input elements for a transposed one (w[1:] already holds C/groups)."""
    return 2 * _prod(x if transposed else out) * _prod(w[1:])


def convolution(dims, types, concrete) -> OpModel:
    """aten::convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding,
    groups): FLOPs = 2·N_out·prod(weight[1:]) (+ N_out for the bias); bytes = input + weight + output
    (+ Cout bias). Needs ``Concrete Inputs`` for stride/padding (no model without them)."""
    x, dt, bpe = _tensor(dims, types, 0)
    w, _, _ = _tensor(dims, types, 1)
    if len(x) < 3 or len(w) != len(x) or concrete is None:
        raise _NoModel
    nd = len(x) - 2
    transposed = _bool(_concrete(concrete, 6))
    if transposed is None:
        raise _NoModel
    stride, padding = _int_list(_concrete(concrete, 3), nd, 1), _int_list(_concrete(concrete, 4), nd, 0)
    dilation, out_pad = _int_list(_concrete(concrete, 5), nd, 1), _int_list(_concrete(concrete, 7), nd, 0)
    out = _conv_out(x, w, stride, padding, dilation, transposed, out_pad)
    bias = _present(dims, 2)
    flops = _conv_flops(x, w, out, transposed) + (_prod(out) if bias else 0)
    nbytes = (_prod(x) + _prod(w) + _prod(out) + (out[1] if bias else 0)) * bpe
    return OpModel("conv", flops, nbytes, dt)


def _conv_backward(grad_out, x, w, transposed: bool, mask: tuple[bool, bool, bool], bpe: int, dt: str) -> OpModel:
    """Backward of a convolution: grad_input costs what the forward does (a transposed convolution
    of grad_output), grad_weight too (a convolution of input with grad_output), grad_bias sums
    grad_output. Bytes per gradient: its two operands read, itself written (TraceLens' formula).
    ``mask`` = (input, weight, bias) gradients computed."""
    fwd = _conv_flops(x, w, grad_out, transposed)
    flops = (fwd if mask[0] else 0) + (fwd if mask[1] else 0) + (_prod(grad_out) if mask[2] else 0)
    n_out, n_x, n_w = _prod(grad_out), _prod(x), _prod(w)
    nbytes = ((n_out + n_w + n_x if mask[0] else 0) + (n_out + n_x + n_w if mask[1] else 0)
              + (n_out + grad_out[1] if mask[2] else 0)) * bpe
    return OpModel("conv", flops, nbytes, dt)


def _mask(text: str | None, default: tuple[bool, bool, bool]) -> tuple[bool, bool, bool]:
    if text is None:
        return default
    flags = [_bool(t) for t in text.strip("[]").split(",")]
    if len(flags) != 3 or None in flags:
        return default
    return tuple(flags)  # type: ignore[return-value]


def convolution_backward(dims, types, concrete) -> OpModel:
    """aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask). The shapes give everything (grad_output is
    the output); ``output_mask`` says which gradients are computed (all three when not recorded,
    as TraceLens assumes; TraceLens ignores the mask)."""
    out, dt, bpe = _tensor(dims, types, 0)
    x, _, _ = _tensor(dims, types, 1)
    w, _, _ = _tensor(dims, types, 2)
    transposed = _bool(_concrete(concrete, 7)) or False
    mask = _mask(_concrete(concrete, 10), (True, True, _present(dims, 3)))
    return _conv_backward(out, x, w, transposed, mask, bpe, dt)


def cudnn_convolution_backward(dims, types, concrete) -> OpModel:
    """aten::cudnn_convolution_backward(input, grad_output, weight, ...): PyTorch < 1.11's name for
    the cuDNN convolution backward; input and weight gradients (no bias)."""
    x, dt, bpe = _tensor(dims, types, 0)
    out, _, _ = _tensor(dims, types, 1)
    w, _, _ = _tensor(dims, types, 2)
    mask = _mask(_concrete(concrete, 9), (True, True, False))
    return _conv_backward(out, x, w, False, (mask[0], mask[1], False), bpe, dt)


# --- attention ------------------------------------------------------------------------------------
def _causal_fraction(sq: int, sk: int) -> float:
    """Share of the Sq×Sk score matrix a causal mask keeps: ½ for Sq = Sk (the FlashAttention and
    TraceLens convention), else the exact share of the top-left-aligned mask PyTorch's ``is_causal``
    uses (query i sees keys 0..i)."""
    if sq == sk:
        return 0.5
    kept = sk * (sk + 1) / 2 + (sq - sk) * sk if sq > sk else sq * (sq + 1) / 2
    return kept / (sq * sk)


def _attention(q, k, v, causal: bool, backward: bool, bpe: int, dt: str, bshd: bool = False) -> OpModel:
    """Scaled dot-product attention with q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv].

    Forward FLOPs = 2·B·Hq·Sq·Sk·D (Q·Kᵀ) + 2·B·Hq·Sq·Sk·Dv (P·V), i.e. 4·B·H·Sq·Sk·D, scaled by the
    causal share. Backward (memory-efficient kernels recompute Q·Kᵀ): five such products, 2.5× the
    forward, plus B·Sk·D·(Hq/Hkv − 1) for summing the K and V gradients over the query heads of a
    GQA group (TraceLens' ``flops_bwd_func`` with ``flash_impl``). Bytes: Q, K, V read and O
    written; backward reads Q, K, V, dO and writes dQ, dK, dV. Softmax FLOPs are not counted.
    """
    if bshd:  # [B, S, H, D] layouts
        q, k, v = ([s[0], s[2], s[1], s[3]] for s in (q, k, v))
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise _NoModel
    b, hq, sq, d = q
    _, hkv, sk, _ = k
    dv = v[3]
    if hkv == 0 or hq % hkv:
        raise _NoModel
    share = _causal_fraction(sq, sk) if causal else 1.0
    qk, pv = 2 * b * hq * sq * sk * d, 2 * b * hq * sq * sk * dv
    elems_q, elems_k, elems_v, elems_o = b * hq * sq * d, b * hkv * sk * d, b * hkv * sk * dv, b * hq * sq * dv
    if not backward:
        return OpModel("attention", (qk + pv) * share, (elems_q + elems_k + elems_v + elems_o) * bpe, dt)
    flops = (qk + pv + pv + qk + qk) * share  # recompute S, dV, dP, dQ, dK
    flops += b * sk * (dv + d) * (hq // hkv - 1)
    nbytes = (2 * (elems_q + elems_k + elems_v) + elems_o) * bpe
    return OpModel("attention", flops, nbytes, dt)


def _sdpa(q_at: int, causal_at: int, backward: bool = False) -> Callable:
    def fn(dims, types, concrete) -> OpModel:
        q, dt, bpe = _tensor(dims, types, q_at)
        k, _, _ = _tensor(dims, types, q_at + 1)
        v, _, _ = _tensor(dims, types, q_at + 2)
        causal = _bool(_concrete(concrete, causal_at))
        if causal is None:
            raise _NoModel  # is_causal not recorded: halving or not would be a guess
        return _attention(q, k, v, causal, backward, bpe, dt)

    fn.__doc__ = (f"Attention with q at argument {q_at} and is_causal at {causal_at} "
                  f"({'backward' if backward else 'forward'}): see :func:`_attention`.")
    return fn


# --- memory-bound ops -----------------------------------------------------------------------------
def elementwise(inplace: bool, n_inputs: int | None = None) -> Callable:
    """Element-wise op over its tensor inputs (scalars cost nothing): FLOPs = output elements
    (broadcast shape); bytes = every tensor input read + the output written in the widest input
    dtype (TraceLens' rule; for an in-place op, the first input is the output: read and written)."""
    def fn(dims, types, concrete) -> OpModel:
        tensors = [_tensor(dims, types, i) for i in range(len(dims)) if _is_tensor(dims, types, i)]
        if n_inputs is not None:
            tensors = tensors[:n_inputs]
        if not tensors:
            raise _NoModel
        shape = tensors[0][0]
        for s, _, _ in tensors[1:]:
            shape = _broadcast(shape, s)
        n_out = _prod(shape)
        _, dt, bpe_out = tensors[0] if inplace else max(tensors, key=lambda t: t[2])
        nbytes = sum(_prod(s) * bpe for s, _, bpe in tensors) + n_out * bpe_out
        return OpModel("elementwise", n_out, nbytes, dt)

    return fn


def _is_tensor(dims, types, i) -> bool:
    return (i < len(types) and isinstance(types[i], str) and dtype_info(types[i]) is not None
            and isinstance(dims[i], list))


def fill(dims, types, concrete) -> OpModel:
    """aten::fill_/zero_(self, ...): self written once; no FLOPs."""
    s, dt, bpe = _tensor(dims, types, 0)
    return OpModel("copy", 0, _prod(s) * bpe, dt)


def copy(dims, types, concrete) -> OpModel:
    """aten::copy_(self, src): src read in its dtype, self written in its dtype; no FLOPs."""
    dst, dt, bpe_dst = _tensor(dims, types, 0)
    src, _, bpe_src = _tensor(dims, types, 1)
    return OpModel("copy", 0, _prod(src) * bpe_src + _prod(dst) * bpe_dst, dt)


def _norm(n: int, c: int, bpe: int, dt: str, training: bool, affine: bool, bias: bool, backward: bool) -> OpModel:
    """Normalisation over N elements with C-sized parameters (TraceLens' ``Normalization``).

    Forward FLOPs = 2·N + 3·C + 3·C (+ 3·N when training: the statistics); bytes = input and output
    (N each) + C per parameter vector (mean, variance, weight if affine, bias, and two more saved
    statistics when training). Backward bytes = dO and input read, dI written (3·N) + the C-sized
    vectors; FLOPs = C·(4·N/C + 5·N/C when training else 2·N/C)."""
    if not backward:
        flops = 2 * n + 6 * c + (3 * n if training else 0)
        vectors = 2 + (1 if affine else 0) + (1 if affine and bias else 0) + (2 if training else 0)
        return OpModel("norm", flops, 2 * n * bpe + vectors * c * bpe, dt)
    per_c = n / max(c, 1)
    flops = c * ((0 if training else 3) + 4 * per_c + (5 * per_c if training else 2 * per_c))
    nbytes = 3 * n * bpe + (c * bpe if training else 0) + (c * bpe if affine else 0)
    nbytes += c * bpe * (2 if bias else 1) if affine and training else 0
    return OpModel("norm", flops, nbytes, dt)


def layer_norm(dims, types, concrete) -> OpModel:
    """aten::native_layer_norm(input, normalized_shape, weight?, bias?, eps): C = prod(normalized_shape)
    (from ``Concrete Inputs``, else the weight's size)."""
    x, dt, bpe = _tensor(dims, types, 0)
    c = _normalized_size(_concrete(concrete, 1), dims, 2)
    return _norm(_prod(x), c, bpe, dt, True, _present(dims, 2), _present(dims, 3), False)


def layer_norm_backward(dims, types, concrete) -> OpModel:
    """aten::native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
    output_mask)."""
    x, dt, bpe = _tensor(dims, types, 1)
    c = _normalized_size(_concrete(concrete, 2), dims, 5)
    return _norm(_prod(x), c, bpe, dt, True, _present(dims, 5), _present(dims, 6), True)


def _normalized_size(text: str | None, dims, weight_at: int) -> int:
    if text is not None:
        return _prod(_int_list(text, len(text.split(",")), 1))
    if _present(dims, weight_at):
        return _prod(dims[weight_at])
    raise _NoModel


def batch_norm(dims, types, concrete) -> OpModel:
    """aten::native_batch_norm / cudnn_batch_norm / miopen_batch_norm(input, weight?, bias?,
    running_mean?, running_var?, training, momentum, eps): C = input.shape[1]. ``training`` from
    ``Concrete Inputs``; when not recorded, inference is assumed for the C-sized terms only
    (they are < 1 % of the bytes for any real activation)."""
    x, dt, bpe = _tensor(dims, types, 0)
    if len(x) < 2:
        raise _NoModel
    training = bool(_bool(_concrete(concrete, 5)))
    return _norm(_prod(x), x[1], bpe, dt, training, _present(dims, 1), _present(dims, 2), False)


def batch_norm_backward(input_at: int) -> Callable:
    def fn(dims, types, concrete) -> OpModel:
        """Batch-norm backward (input at ``input_at``): see :func:`_norm`."""
        x, dt, bpe = _tensor(dims, types, input_at)
        if len(x) < 2:
            raise _NoModel
        return _norm(_prod(x), x[1], bpe, dt, True, True, True, True)

    return fn


def group_norm(dims, types, concrete) -> OpModel:
    """aten::native_group_norm(input, weight?, bias?, N, C, HxW, group, eps): C = input.shape[1]."""
    x, dt, bpe = _tensor(dims, types, 0)
    if len(x) < 2:
        raise _NoModel
    return _norm(_prod(x), x[1], bpe, dt, True, _present(dims, 1), _present(dims, 2), False)


def rms_norm(dims, types, concrete) -> OpModel:
    """aten::_fused_rms_norm(input, normalized_shape, weight?, eps) and vLLM's _C::rms_norm(out,
    input, weight, eps): input read, output written, weight read; FLOPs = 4 per element (square,
    sum, scale, weight)."""
    first, dt, bpe = _tensor(dims, types, 0)
    last = dims[-2] if len(dims) >= 2 and isinstance(dims[-2], list) else []
    n, c = _prod(first), (_prod(last) if last else first[-1])
    return OpModel("norm", 4 * n, (2 * n + c) * bpe, dt)


def fused_add_rms_norm(dims, types, concrete) -> OpModel:
    """vLLM _C::fused_add_rms_norm(input, residual, weight, eps): residual += input, input =
    rms_norm(residual) · weight: input and residual read and written, weight read; FLOPs = 5 per
    element."""
    x, dt, bpe = _tensor(dims, types, 0)
    w, _, _ = _tensor(dims, types, 2)
    n = _prod(x)
    return OpModel("norm", 5 * n, (4 * n + _prod(w)) * bpe, dt)


def softmax(dims, types, concrete) -> OpModel:
    """aten::_softmax / _log_softmax(input, dim, half_to_float): input read, output written;
    FLOPs = 3 per element (max, exp-sum, divide), TraceLens' ``Softmax``: 2 reads+writes."""
    x, dt, bpe = _tensor(dims, types, 0)
    n = _prod(x)
    return OpModel("elementwise", 3 * n, 2 * n * bpe, dt)


def reduction(dims, types, concrete) -> OpModel:
    """aten::sum/mean/amax/amin(input, dim?, keepdim?, ...): input read, output written; 1 FLOP
    per input element. The output size needs the reduced dims (``Concrete Inputs``); a call with
    only (input[, dtype]) reduces everything to one element."""
    x, dt, bpe = _tensor(dims, types, 0)
    n_in = _prod(x)
    if len(dims) <= 2:
        n_out = 1
    else:
        text = _concrete(concrete, 1)
        if text is None:
            raise _NoModel
        reduced = [int(t) % max(len(x), 1) for t in text.strip("[]").replace(" ", "").split(",") if t != ""]
        n_out = _prod([s for i, s in enumerate(x) if i not in reduced]) if reduced else 1
    return OpModel("reduce", n_in, (n_in + n_out) * bpe, dt)


# --- the registry ---------------------------------------------------------------------------------
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
    "aten::native_batch_norm_backward": batch_norm_backward(1), "aten::cudnn_batch_norm_backward": batch_norm_backward(0),
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
