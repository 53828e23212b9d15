"""The PyTorch TensorBoard profiler's GPU metrics, per kernel, from what Kineto records.

Definitions (those of ``torch_tb_profiler``, kineto/tb_plugin, written down here):

* **Tensor Core kernel**: a kernel whose name contains one of the TensorBoard plugin's allowlist
  substrings (``TC_Allowlist``, taken from NVIDIA PyProf: ``h884``, ``s1688``, ``hmma``,
  ``xmma_gemm``...), extended for kernels that list predates: cuBLAS/CUTLASS ``tensorop``,
  ``sm80_xmma``/``sm90_xmma``/``sm100_xmma``, Hopper ``wgmma`` and ``nvjet`` (cuBLASLt's Hopper+
  GEMMs), Blackwell ``tcgen05`` and TensorRT-LLM kernels named for their ``_sm100f``-style target,
  FlashAttention / cuDNN fused attention (``flash_fwd``, ``flash_bwd``, ``fmha``,
  ``cudnn_generated_fort_native_sdpa``) and AMD matrix-core kernels (Tensile GEMMs name their
  MFMA tile ``_MI16x16x...``; CK and Triton attention ``attn_fwd``/``attn_bwd``). **Tensor Core
  usage** = share of kernel time in such kernels.
* **Estimated SM efficiency** of a kernel = min(blocks per SM, 1) × 100 %: a kernel with fewer
  blocks than SMs leaves SMs idle. ``blocks per SM`` is Kineto's arg, else grid blocks / the
  device's ``numSms``. Aggregates weight kernels by duration (TensorBoard divides by the whole
  step, idle time included; perfreport reports over kernel time, the idle share being the idle
  analysis's job).
* **Estimated achieved occupancy** = Kineto's ``est. achieved occupancy %`` (active warps over
  the SM's maximum, from the launch's blocks, registers per thread and shared memory), weighted
  by kernel duration over the kernels that carry it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...model import RankTrace, distinct_codes, search_sorted

TC_PATTERN = re.compile(
    r"h884|s884|h1688|s1688|hmma|i8816|16816|dgrad_1x1_stride_2x2|first_layer_wgrad_kernel|conv1x1|"
    r"conv2d_c1_k1|direct_group|xmma_implicit_gemm|xmma_sparse_conv|xmma_warp_specialized_implicit_gemm|"
    r"xmma_gemm|xmma_sparse_gemm|c1688"  # TensorBoard's TC_Allowlist
    r"|tensorop|sm\d+_xmma|wgmma|nvjet|gmma|tcgen05|_sm1\d\d[af]?$|flash_fwd|flash_bwd|fmha|native_sdpa"
    r"|_MI\d+x\d+x\d+|attn_fwd|attn_bwd"
)
"""Kernel names that run on Tensor Cores / matrix cores (see module doc)."""
TF32_PATTERN = re.compile(r"tf32", re.IGNORECASE)
"""Kernel names of FP32 GEMMs/convolutions that run in TF32 on Tensor Cores."""


def args_at(trace: RankTrace, keys: Sequence[tuple[str, Any]], rows: np.ndarray) -> list[np.ndarray]:
    """``[trace.arg(key, default, rows) for key, default in keys]`` with one search of ``rows``
    per distinct set of event rows among the keys' sparse columns: Kineto writes a kernel's
    launch args (grid, registers, occupancy ...), or an op's shapes and types, on the same
    events, so their columns share their rows and the positions found for one serve them all."""
    rows = np.asarray(rows, dtype=np.int64)
    searched: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (column rows, hits, their positions)
    out = []
    for key, default in keys:
        col = trace.args.get(key)
        if col is None or not len(col.rows):
            out.append(trace.arg(key, default, rows))
            continue
        for col_rows, hit, at in searched:
            if col_rows is col.rows or (len(col_rows) == len(col.rows) and np.array_equal(col_rows, col.rows)):
                break
        else:
            pos = np.minimum(search_sorted(col.rows, rows), len(col.rows) - 1)  # as RankTrace.arg
            hit = col.rows[pos] == rows
            at = pos[hit]
            searched.append((col.rows, hit, at))
        values = np.full(rows.shape, default, dtype=np.result_type(col.values.dtype, np.asarray(default).dtype))
        values[hit] = col.values[at]
        out.append(values)
    return out


def _per_name(trace: RankTrace, codes: np.ndarray, fn) -> np.ndarray:
    """``fn(string)`` (bool) per code, evaluated once per distinct code."""
    uniq, inverse = distinct_codes(codes, len(trace.strings))
    values = np.array([bool(fn(trace.strings[c])) if c >= 0 else False for c in uniq.tolist()], dtype=bool)
    return values[inverse]


def tensor_core_kernels(trace: RankTrace, rows: np.ndarray) -> np.ndarray:
    """Per row of ``rows`` (GPU events): whether it is a Tensor Core kernel (see module doc)."""
    return _per_name(trace, trace.name[rows], TC_PATTERN.search)


def tf32_kernels(trace: RankTrace, rows: np.ndarray) -> np.ndarray:
    """Per row: whether the kernel's name says TF32."""
    return _per_name(trace, trace.name[rows], TF32_PATTERN.search)


def _grid_blocks(text: str) -> float:
    try:
        grid = json.loads(text)
        return float(np.prod([int(x) for x in grid])) if isinstance(grid, list) and grid else np.nan
    except (ValueError, TypeError):
        return np.nan


def num_sms(trace: RankTrace) -> float:
    """``numSms`` (NVIDIA SMs / AMD CUs) of the rank's first listed device, NaN if not recorded."""
    props = next((p for p in trace.meta.device_properties if isinstance(p, dict)), {})
    value = props.get("numSms")
    return float(value) if isinstance(value, (int, float)) and value > 0 else np.nan


def sm_efficiency_pct(trace: RankTrace, rows: np.ndarray, blocks_per_sm: np.ndarray | None = None) -> np.ndarray:
    """Per kernel row: estimated SM efficiency in % (NaN where neither ``blocks per SM`` nor a grid
    with the device's SM count was recorded). ``blocks_per_sm``: that arg at ``rows`` when the
    caller looked it up already."""
    if blocks_per_sm is None:
        blocks_per_sm = trace.arg("blocks per SM", np.nan, rows)
    blocks_per_sm = blocks_per_sm.astype(np.float64)
    missing = ~np.isfinite(blocks_per_sm)
    if missing.any():
        grid = trace.arg("grid", -1, rows[missing]).astype(np.int64)
        uniq, inverse = np.unique(grid, return_inverse=True)
        blocks = np.array([_grid_blocks(trace.strings[c]) if c >= 0 else np.nan for c in uniq.tolist()])
        blocks_per_sm[missing] = blocks[inverse.ravel()] / num_sms(trace)
    return np.where(blocks_per_sm > 0, np.minimum(blocks_per_sm, 1.0) * 100.0, np.nan)


def occupancy_pct(trace: RankTrace, rows: np.ndarray, occ: np.ndarray | None = None) -> np.ndarray:
    """Per kernel row: Kineto's ``est. achieved occupancy %`` (NaN where not recorded or negative);
    ``occ``: that arg at ``rows`` when the caller looked it up already."""
    if occ is None:
        occ = trace.arg("est. achieved occupancy %", np.nan, rows)
    occ = occ.astype(np.float64)
    return np.where(occ >= 0, occ, np.nan)


def weighted_pct(values: np.ndarray, weights: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """Per group: the ``weights``-weighted mean of ``values`` over the rows where it is finite
    (NaN for a group with none)."""
    ok = np.isfinite(values)
    num = np.bincount(groups[ok], weights=values[ok] * weights[ok], minlength=n)
    den = np.bincount(groups[ok], weights=weights[ok], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def kernel_metrics(trace: RankTrace) -> dict[str, np.ndarray]:
    """Per GPU work row (``rows`` = :meth:`RankTrace.gpu_work_rows`): ``tensor_core``, ``tf32``,
    ``sm_efficiency_pct``, ``occupancy_pct``, ``registers`` and ``shared_memory`` (-1 when not
    recorded). Memoised: every efficiency table reads the same per-kernel values, each args
    column is looked up once."""
    def compute() -> dict[str, np.ndarray]:
        rows = trace.gpu_work_rows()
        blocks, occ, registers, shared = args_at(trace, [("blocks per SM", np.nan), ("est. achieved occupancy %", np.nan),
                                                         ("registers per thread", -1), ("shared memory", -1)], rows)
        out = {"rows": rows, "tensor_core": tensor_core_kernels(trace, rows), "tf32": tf32_kernels(trace, rows),
               "sm_efficiency_pct": sm_efficiency_pct(trace, rows, blocks), "occupancy_pct": occupancy_pct(trace, rows, occ),
               "registers": registers.astype(np.int64), "shared_memory": shared.astype(np.int64)}
        for value in out.values():
            value.flags.writeable = False
        return out

    return trace.memo("efficiency_kernel_metrics", compute)


def metrics_of(trace: RankTrace, rows: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`kernel_metrics` at ``rows`` (a subset of the GPU work rows, ascending or not)."""
    table = kernel_metrics(trace)
    pos = np.minimum(search_sorted(table["rows"], rows), max(len(table["rows"]) - 1, 0))
    if len(rows) and not np.array_equal(table["rows"][pos], rows):
        raise ValueError("metrics_of: rows outside the GPU work rows")
    return {k: v[pos] for k, v in table.items() if k != "rows"}
