"""Kernel variants: another kernel of the same family for the same work is no structural change.

cuDNN picks a convolution kernel per process - by timing candidates (``cudnn.benchmark``) or
by heuristics - so two runs of unchanged code launch other ``cutlass…dgrad…`` / ``xmma…fprop…``
kernels for the same layers (14 of the 20 recorded repeat pairs did). Calling that "kernel
removed / added" teaches users to ignore warnings. What matters is whether the family's GPU
time moved:

* the family runs on both sides and its kernels changed -> its GPU time per step is judged like
  any timing check (threshold, significance, noise widths); unchanged within noise -> a note
  ("cuDNN picked other convolution kernels (bf16): no time change"), the structural check passes;
* the time moved -> the timing finding ``relative.kernel_time[<family>]``, naming the kernels
  that left and came;
* a family present on one side only (fp32 kernels instead of bf16, a new layout transform) stays
  structure.

A family is recognised from the kernel's name: cuDNN convolution kernels (cutlass/xmma
implicit-GEMM conv kernels built into cuDNN, fprop/dgrad/wgrad, the ``volta_scudnn_*`` /
``cudnn::cnn::*`` engines), by data type where the name says it; kernels without a data type
in their name (split-K reduction, workspace init, older engines) belong to whichever cuDNN
convolution family runs (the fp32 family). The traces carry no input shapes by default, so
"same work" is the same family on the same rank with its time unchanged within noise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .keyed import keyed_samples
from .metrics import SideData

CUDNN_CONV = re.compile(r"cudnn|^(explicit|implicit)_convolve_", re.IGNORECASE)
CONV_KERNEL = re.compile(r"fprop|dgrad|wgrad|conv2d|convolution|convolve|reducesplitk|init_device_workspace|"
                         r"[sh]cudnn|cnn::|implicit_gemm|precomp|winograd|im2col|fft", re.IGNORECASE)
CONV_DIRECTION = re.compile(r"fprop|dgrad|wgrad|conv2d|convolution|convolve", re.IGNORECASE)
"""Names that say convolution outright (a cutlass wgrad iterator's name may say "Activation")."""
NOT_CONV = re.compile(r"batchnorm|bn_|norm|nchwToNhwc|nhwcToNchw|convertTensor|sdpa|fusion|softmax|pool|lrn|"
                      r"activation|op_tensor|rnn|dropout", re.IGNORECASE)
"""cuDNN kernels that are no convolution: layout transforms, normalisation, attention are work
of their own, and one appearing is structure."""
DTYPE = re.compile(r"bf16|bfloat16|tf32|fp16|f16|half", re.IGNORECASE)
"""Reduced-precision data types named in a kernel's name; without one it is fp32 (or unnamed)."""
DTYPE_NAMES = {"bfloat16": "bf16", "half": "f16", "fp16": "f16"}
HELPERS = "cuDNN convolution"
"""The family of dtype-less cuDNN convolution helpers: present wherever any cuDNN convolution runs."""


def family_of(key: str) -> str | None:
    """The variant family of a (normalised) kernel name, e.g. "cuDNN convolution bf16"; None
    for kernels whose choice is not a library's per-process pick.

    >>> family_of("sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_kernel__5x_cudnn")
    'cuDNN convolution bf16'
    >>> family_of("cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::reduction::kernel::ReduceSplitK>")
    'cuDNN convolution'
    >>> family_of("volta_scudnn_128x128_stridedB_interior_nn_v1")
    'cuDNN convolution'
    >>> family_of("cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>") is None
    True
    """
    if not CUDNN_CONV.search(key) or not CONV_KERNEL.search(key):
        return None
    if not CONV_DIRECTION.search(key) and NOT_CONV.search(key):
        return None
    dtype = DTYPE.search(key)
    if dtype is None:
        return HELPERS
    name = dtype.group(0).lower()
    return f"{HELPERS} {DTYPE_NAMES.get(name, name)}"


def families(keys: list[str]) -> list[str | None]:
    """:func:`family_of` of every key."""
    return [family_of(str(k).strip()) for k in keys]


def present_families(keys: list[str], counts: np.ndarray) -> dict[str, np.ndarray]:
    """Family -> whether it runs in each row of ``counts`` (rows x keys, median calls per step);
    the helpers' family runs wherever any cuDNN convolution kernel does."""
    fam = families(keys)
    out: dict[str, np.ndarray] = {}
    for f in {f for f in fam if f is not None}:
        cols = [j for j, x in enumerate(fam) if x is not None and (x == f or f == HELPERS)]
        out[f] = counts[:, cols].sum(axis=1) > 0
    return out


def variant_mask(keys: list[str], b_counts: np.ndarray, c_counts: np.ndarray) -> np.ndarray:
    """rows x keys: True where a key belongs to a family that runs on both sides in that row, so
    its appearing or disappearing is another variant of the same work, not structure."""
    fam = families(keys)
    b_present, c_present = present_families(keys, b_counts), present_families(keys, c_counts)
    out = np.zeros(b_counts.shape, dtype=bool)
    for j, f in enumerate(fam):
        if f is not None:
            out[:, j] = b_present[f] & c_present[f]
    return out




@dataclass(frozen=True, slots=True)
class Swap:
    """A family whose kernels changed while it ran on both sides: every key of the family
    (either side), and the kernels that left (``removed``) and came (``added``) on some rank."""

    family: str
    keys: tuple[str, ...]
    removed: tuple[str, ...]
    added: tuple[str, ...]

    def picked(self, limit: int = 2) -> str:
        """"X instead of Y" with at most ``limit`` names a side (the rest counted)."""
        def names(keys: tuple[str, ...]) -> str:
            shown = ", ".join(k.strip() for k in keys[:limit])
            return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "") if keys else "nothing"
        return f"{names(self.added)} instead of {names(self.removed)}"


def kernel_swaps(b: SideData, c: SideData, pairs: list[tuple[int, int]], keys: list[str]) -> dict[str, Swap]:
    """Families whose kernels changed between the sides while the family ran on both (per rank
    pair, or over all samples when no ranks pair), by family."""
    fam = families(keys)
    keys = [k for k, f in zip(keys, fam) if f is not None]
    if not keys or not len(b.steps) or not len(c.steps):
        return {}
    b_wide = keyed_samples(b, "op_steps", ("key",), "count", keys)
    c_wide = keyed_samples(c, "op_steps", ("key",), "count", keys)
    if pairs:
        bm = b_wide.groupby(level="rank").median().reindex([x for x, _ in pairs]).fillna(0.0).to_numpy()
        cm = c_wide.groupby(level="rank").median().reindex([y for _, y in pairs]).fillna(0.0).to_numpy()
    else:
        bm, cm = b_wide.median().to_numpy()[None, :], c_wide.median().to_numpy()[None, :]
    swapped = variant_mask(keys, bm, cm) & ((bm > 0) != (cm > 0))
    out: dict[str, Swap] = {}
    fam = families(keys)
    for f in dict.fromkeys(fam[j] for j in np.flatnonzero(swapped.any(axis=0))):
        members = [j for j, x in enumerate(fam) if x == f]
        removed = tuple(keys[j] for j in members if (swapped[:, j] & (bm[:, j] > 0)).any())
        added = tuple(keys[j] for j in members if (swapped[:, j] & (cm[:, j] > 0)).any())
        out[f] = Swap(f, tuple(keys[j] for j in members), removed, added)
    return out


__all__ = ["family_of", "families", "variant_mask", "present_families", "Swap", "kernel_swaps"]
