"""FLOPs and bytes of the memory-bound ops: element-wise, normalisation, softmax, reductions and
copies. Each formula is documented next to its code; conventions in :mod:`.perfmodel`."""

from __future__ import annotations

from typing import Callable

from .shapes import (
    NoModel, OpModel, as_bool, broadcast, concrete_arg, dtype_info, int_list, numel, present, tensor_arg,
)


# --- memory-bound ops -----------------------------------------------------------------------------
def elementwise(inplace: bool, n_inputs: int | None = None) -> Callable:
    """Element-wise op over its tensor inputs (scalars cost nothing): FLOPs = output elements
    (broadcast shape); bytes = every tensor input read + the output written in the widest input
    dtype (TraceLens' rule; for an in-place op, the first input is the output: read and written)."""
    def fn(dims, types, concrete) -> OpModel:
        tensors = [tensor_arg(dims, types, i) for i in range(len(dims)) if _is_tensor(dims, types, i)]
        if n_inputs is not None:
            tensors = tensors[:n_inputs]
        if not tensors:
            raise NoModel
        shape = tensors[0][0]
        for s, _, _ in tensors[1:]:
            shape = broadcast(shape, s)
        n_out = numel(shape)
        _, dt, bpe_out = tensors[0] if inplace else max(tensors, key=lambda t: t[2])
        nbytes = sum(numel(s) * bpe for s, _, bpe in tensors) + n_out * bpe_out
        return OpModel("elementwise", n_out, nbytes, dt)

    return fn


def _is_tensor(dims, types, i) -> bool:
    return (i < len(types) and isinstance(types[i], str) and dtype_info(types[i]) is not None
            and isinstance(dims[i], list))


def fill(dims, types, concrete) -> OpModel:
    """aten::fill_/zero_(self, ...): self written once; no FLOPs."""
    s, dt, bpe = tensor_arg(dims, types, 0)
    return OpModel("copy", 0, numel(s) * bpe, dt)


def copy(dims, types, concrete) -> OpModel:
    """aten::copy_(self, src): src read in its dtype, self written in its dtype; no FLOPs."""
    dst, dt, bpe_dst = tensor_arg(dims, types, 0)
    src, _, bpe_src = tensor_arg(dims, types, 1)
    return OpModel("copy", 0, numel(src) * bpe_src + numel(dst) * bpe_dst, dt)


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
    x, dt, bpe = tensor_arg(dims, types, 0)
    c = _normalized_size(concrete_arg(concrete, 1), dims, 2)
    return _norm(numel(x), c, bpe, dt, True, present(dims, 2), present(dims, 3), False)


def layer_norm_backward(dims, types, concrete) -> OpModel:
    """aten::native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
    output_mask)."""
    x, dt, bpe = tensor_arg(dims, types, 1)
    c = _normalized_size(concrete_arg(concrete, 2), dims, 5)
    return _norm(numel(x), c, bpe, dt, True, present(dims, 5), present(dims, 6), True)


def _normalized_size(text: str | None, dims, weight_at: int) -> int:
    if text is not None:
        return numel(int_list(text, len(text.split(",")), 1))
    if present(dims, weight_at):
        return numel(dims[weight_at])
    raise NoModel


def batch_norm(dims, types, concrete) -> OpModel:
    """aten::native_batch_norm / cudnn_batch_norm / miopen_batch_norm(input, weight?, bias?,
    running_mean?, running_var?, training, momentum, eps): C = input.shape[1]. ``training`` from
    ``Concrete Inputs``; when not recorded, inference is assumed for the C-sized terms only
    (they are < 1 % of the bytes for any real activation)."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    if len(x) < 2:
        raise NoModel
    training = bool(as_bool(concrete_arg(concrete, 5)))
    return _norm(numel(x), x[1], bpe, dt, training, present(dims, 1), present(dims, 2), False)


def batch_norm_backward(input_at: int) -> Callable:
    def fn(dims, types, concrete) -> OpModel:
        """Batch-norm backward (input at ``input_at``): see :func:`_norm`."""
        x, dt, bpe = tensor_arg(dims, types, input_at)
        if len(x) < 2:
            raise NoModel
        return _norm(numel(x), x[1], bpe, dt, True, True, True, True)

    return fn


def group_norm(dims, types, concrete) -> OpModel:
    """aten::native_group_norm(input, weight?, bias?, N, C, HxW, group, eps): C = input.shape[1]."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    if len(x) < 2:
        raise NoModel
    return _norm(numel(x), x[1], bpe, dt, True, present(dims, 1), present(dims, 2), False)


def rms_norm(dims, types, concrete) -> OpModel:
    """aten::_fused_rms_norm(input, normalized_shape, weight?, eps) and vLLM's _C::rms_norm(out,
    input, weight, eps): input read, output written, weight read; FLOPs = 4 per element (square,
    sum, scale, weight)."""
    first, dt, bpe = tensor_arg(dims, types, 0)
    last = dims[-2] if len(dims) >= 2 and isinstance(dims[-2], list) else []
    n, c = numel(first), (numel(last) if last else first[-1])
    return OpModel("norm", 4 * n, (2 * n + c) * bpe, dt)


def fused_add_rms_norm(dims, types, concrete) -> OpModel:
    """vLLM _C::fused_add_rms_norm(input, residual, weight, eps): residual += input, input =
    rms_norm(residual) · weight: input and residual read and written, weight read; FLOPs = 5 per
    element."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    w, _, _ = tensor_arg(dims, types, 2)
    n = numel(x)
    return OpModel("norm", 5 * n, (4 * n + numel(w)) * bpe, dt)


def softmax(dims, types, concrete) -> OpModel:
    """aten::_softmax / _log_softmax(input, dim, half_to_float): input read, output written;
    FLOPs = 3 per element (max, exp-sum, divide), TraceLens' ``Softmax``: 2 reads+writes."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    n = numel(x)
    return OpModel("elementwise", 3 * n, 2 * n * bpe, dt)


def reduction(dims, types, concrete) -> OpModel:
    """aten::sum/mean/amax/amin(input, dim?, keepdim?, ...): input read, output written; 1 FLOP
    per input element. The output size needs the reduced dims (``Concrete Inputs``); a call with
    only (input[, dtype]) reduces everything to one element."""
    x, dt, bpe = tensor_arg(dims, types, 0)
    n_in = numel(x)
    if len(dims) <= 2:
        n_out = 1
    else:
        text = concrete_arg(concrete, 1)
        if text is None:
            raise NoModel
        reduced = [int(t) % max(len(x), 1) for t in text.strip("[]").replace(" ", "").split(",") if t != ""]
        n_out = numel([s for i, s in enumerate(x) if i not in reduced]) if reduced else 1
    return OpModel("reduce", n_in, (n_in + n_out) * bpe, dt)
