"""FLOPs and bytes of the matrix ops (tensor-core eligible): GEMMs, convolutions (forward,
transposed, backward) and scaled dot-product attention (forward, backward, causal or not). Each
formula is documented next to its code; conventions in :mod:`.perfmodel`."""

from __future__ import annotations

from typing import Callable

from .shapes import (
    NoModel, OpModel, as_bool, broadcast, concrete_arg, int_list, numel, present, tensor_arg,
)


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
    return _gemm(1, m, n, k, present(dims, 4), bpe, bpe_b, out, dt)


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
    a, dt, bpe = tensor_arg(dims, types, 0)
    b, _, bpe_b = tensor_arg(dims, types, 1)
    if not a or not b:
        raise NoModel
    a2 = [1] + a if len(a) == 1 else a
    b2 = b + [1] if len(b) == 1 else b
    batch = broadcast(a2[:-2], b2[:-2])
    return _gemm(numel(batch), a2[-2], b2[-1], a2[-1], False, bpe, bpe_b, bpe, dt)


def linear(dims, types, concrete) -> OpModel:
    """aten::linear(x[..., K], W[N, K], bias?): M = product of x's leading dims. Only reached when
    no inner addmm/mm was recorded."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    (n, k), _, bpe_w = _2d(dims, types, 1)
    if not x or x[-1] != k:
        raise NoModel
    return _gemm(1, numel(x[:-1]), n, k, present(dims, 2), bpe, bpe_w, bpe, dt)


def _2d(dims, types, i):
    return _nd(dims, types, i, 2)


def _nd(dims, types, i, n):
    shape, dt, bpe = tensor_arg(dims, types, i)
    if len(shape) != n:
        raise NoModel
    return shape, dt, bpe


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
        raise NoModel
    return [x[0], w[0] if not transposed else w[1]] + spatial


def _conv_flops(x, w, out, transposed: bool) -> int:
    """2 · (elements that each see the whole filter) · prod(w[1:]): output elements for a
    convolution, input elements for a transposed one (w[1:] already holds C/groups)."""
    return 2 * numel(x if transposed else out) * numel(w[1:])


def convolution(dims, types, concrete) -> OpModel:
    """aten::convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding,
    groups): FLOPs = 2·N_out·prod(weight[1:]) (+ N_out for the bias); bytes = input + weight + output
    (+ Cout bias). Needs ``Concrete Inputs`` for stride/padding (no model without them)."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    w, _, _ = tensor_arg(dims, types, 1)
    if len(x) < 3 or len(w) != len(x) or concrete is None:
        raise NoModel
    nd = len(x) - 2
    transposed = as_bool(concrete_arg(concrete, 6))
    if transposed is None:
        raise NoModel
    stride, padding = int_list(concrete_arg(concrete, 3), nd, 1), int_list(concrete_arg(concrete, 4), nd, 0)
    dilation, out_pad = int_list(concrete_arg(concrete, 5), nd, 1), int_list(concrete_arg(concrete, 7), nd, 0)
    out = _conv_out(x, w, stride, padding, dilation, transposed, out_pad)
    bias = present(dims, 2)
    flops = _conv_flops(x, w, out, transposed) + (numel(out) if bias else 0)
    nbytes = (numel(x) + numel(w) + numel(out) + (out[1] if bias else 0)) * bpe
    return OpModel("conv", flops, nbytes, dt)


def _conv_backward(grad_out, x, w, transposed: bool, mask: tuple[bool, bool, bool], bpe: int, dt: str) -> OpModel:
    """Backward of a convolution: grad_input costs what the forward does (a transposed convolution
    of grad_output), grad_weight too (a convolution of input with grad_output), grad_bias sums
    grad_output. Bytes per gradient: its two operands read, itself written (TraceLens' formula).
    ``mask`` = (input, weight, bias) gradients computed."""
    fwd = _conv_flops(x, w, grad_out, transposed)
    flops = (fwd if mask[0] else 0) + (fwd if mask[1] else 0) + (numel(grad_out) if mask[2] else 0)
    n_out, n_x, n_w = numel(grad_out), numel(x), numel(w)
    nbytes = ((n_out + n_w + n_x if mask[0] else 0) + (n_out + n_x + n_w if mask[1] else 0)
              + (n_out + grad_out[1] if mask[2] else 0)) * bpe
    return OpModel("conv", flops, nbytes, dt)


def _mask(text: str | None, default: tuple[bool, bool, bool]) -> tuple[bool, bool, bool]:
    if text is None:
        return default
    flags = [as_bool(t) for t in text.strip("[]").split(",")]
    if len(flags) != 3 or None in flags:
        return default
    return tuple(flags)  # type: ignore[return-value]


def convolution_backward(dims, types, concrete) -> OpModel:
    """aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask). The shapes give everything (grad_output is
    the output); ``output_mask`` says which gradients are computed (all three when not recorded,
    as TraceLens assumes; TraceLens ignores the mask)."""
    out, dt, bpe = tensor_arg(dims, types, 0)
    x, _, _ = tensor_arg(dims, types, 1)
    w, _, _ = tensor_arg(dims, types, 2)
    transposed = as_bool(concrete_arg(concrete, 7)) or False
    mask = _mask(concrete_arg(concrete, 10), (True, True, present(dims, 3)))
    return _conv_backward(out, x, w, transposed, mask, bpe, dt)


def cudnn_convolution_backward(dims, types, concrete) -> OpModel:
    """aten::cudnn_convolution_backward(input, grad_output, weight, ...): PyTorch < 1.11's name for
    the cuDNN convolution backward; input and weight gradients (no bias)."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    out, _, _ = tensor_arg(dims, types, 1)
    w, _, _ = tensor_arg(dims, types, 2)
    mask = _mask(concrete_arg(concrete, 9), (True, True, False))
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
        raise NoModel
    b, hq, sq, d = q
    _, hkv, sk, _ = k
    dv = v[3]
    if hkv == 0 or hq % hkv:
        raise NoModel
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
        q, dt, bpe = tensor_arg(dims, types, q_at)
        k, _, _ = tensor_arg(dims, types, q_at + 1)
        v, _, _ = tensor_arg(dims, types, q_at + 2)
        causal = as_bool(concrete_arg(concrete, causal_at))
        if causal is None:
            raise NoModel  # is_causal not recorded: halving or not would be a guess
        return _attention(q, k, v, causal, backward, bpe, dt)

    fn.__doc__ = (f"Attention with q at argument {q_at} and is_causal at {causal_at} "
                  f"({'backward' if backward else 'forward'}): see :func:`_attention`.")
    return fn
