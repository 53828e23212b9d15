"""Per rank and per step: the GPU, how much kernel time the performance model covers, and the
TensorBoard metrics (Tensor Core usage, estimated SM efficiency and achieved occupancy; their
definitions are in :mod:`.gpu_metrics`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...model import RankTrace, TraceSet
from ..grouping import string_keys
from .gpu_metrics import kernel_metrics, weighted_pct
from .gpus import rank_gpu
from .op_efficiency import kernel_owner

SUMMARY_COLUMNS = ("rank", "gpu", "gpu_model", "gpu_note", "peak_source", "mem_tbps", "kernel_us", "modelled_us",
                   "modelled_pct", "no_shapes_us", "tensor_core_pct", "est_sm_efficiency_pct",
                   "est_achieved_occupancy_pct")
STEP_COLUMNS = ("rank", "step", "kernel_us", "tensor_core_pct", "est_sm_efficiency_pct", "est_achieved_occupancy_pct")


def _kernels(trace: RankTrace) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the kernel rows among the GPU work, their :func:`kernel_metrics`): the kernels'
    positions among the GPU work rows are known, so the metrics are taken there (no search for
    the rows, as ``metrics_of`` makes for rows of any kind)."""
    table = kernel_metrics(trace)
    pos = np.flatnonzero(trace.kernels()[table["rows"]])
    return table["rows"][pos], {k: v[pos] for k, v in table.items() if k != "rows"}


def _metrics(trace: RankTrace, rows: np.ndarray, group: np.ndarray, n: int,
             m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Kernel time and the duration-weighted metrics per group of ``rows`` (``m``: their
    :func:`kernel_metrics`)."""
    dur = np.nan_to_num(trace.dur[rows])
    total = np.bincount(group, weights=dur, minlength=n)
    tc = np.bincount(group, weights=dur * m["tensor_core"], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        tc_pct = np.where(total > 0, 100.0 * tc / total, np.nan)
    return {"kernel_us": total, "tensor_core_pct": tc_pct,
            "est_sm_efficiency_pct": weighted_pct(m["sm_efficiency_pct"], dur, group, n),
            "est_achieved_occupancy_pct": weighted_pct(m["occupancy_pct"], dur, group, n)}


def efficiency_summary(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: the GPU matched (or the note why not), GPU time (µs: kernels, memcpy,
    memset), the time and share of it under a modelled op, the time under ops with no shapes
    recorded, and the TensorBoard metrics over all kernels."""
    rows = []
    for t in traces:
        match = rank_gpu(t.meta)
        kernels, metrics = _kernels(t)
        m = _metrics(t, kernels, np.zeros(len(kernels), dtype=np.int64), 1, metrics)
        gpu, owner, modelled = kernel_owner(t)
        dur = np.nan_to_num(t.dur[gpu])
        covered = float(dur[modelled].sum())
        all_gpu = float(np.nan_to_num(t.dur[t.gpu_work_rows()]).sum())
        no_shapes = float(dur[~modelled & (t.arg("Input Dims", -1, owner) < 0)].sum())
        spec = match.spec
        rows.append((t.rank, match.device_name or "", spec.name if spec else "", match.note or "",
                     spec.source if spec else "", spec.mem_tbps if spec else np.nan, all_gpu,
                     covered, 100.0 * covered / all_gpu if all_gpu > 0 else np.nan, no_shapes,
                     float(m["tensor_core_pct"][0]), float(m["est_sm_efficiency_pct"][0]),
                     float(m["est_achieved_occupancy_pct"][0])))
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def gpu_metrics_per_step(traces: TraceSet) -> pd.DataFrame:
    """One row per (rank, profiler step): kernel time (µs) and the TensorBoard metrics over the
    step's kernels (a kernel belongs to the step of its launch)."""
    frames = []
    for t in traces:
        kernels, metrics = _kernels(t)
        step = t.iteration[kernels]
        keep = step >= 0
        kernels, step = kernels[keep], step[keep]
        if len(kernels) == 0:
            continue
        steps, group = np.unique(step, return_inverse=True)
        m = _metrics(t, kernels, group.ravel(), len(steps), {k: v[keep] for k, v in metrics.items()})
        frames.append(pd.DataFrame({"rank": t.rank, "step": steps.astype(np.int64), **m}))
    if not frames:
        return pd.DataFrame({c: np.empty(0, np.int64 if c in ("rank", "step") else np.float64) for c in STEP_COLUMNS})
    return pd.concat(frames, ignore_index=True)[list(STEP_COLUMNS)]


KERNEL_COLUMNS = ("rank", "kernel", "count", "kernel_us", "tensor_core", "est_sm_efficiency_pct",
                  "est_achieved_occupancy_pct", "registers_per_thread", "shared_memory_bytes")
TOP_KERNELS = 50
"""Kernels per rank in :func:`kernel_efficiency` (by total time); the rest are in no row."""


def kernel_efficiency(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, kernel name), the rank's top :data:`TOP_KERNELS` by time: launches, time (µs),
    whether it is a Tensor Core kernel, the TensorBoard estimates (kernel-time weighted) and the
    launch's registers per thread and shared memory (bytes; the largest launch's)."""
    frames = []
    for t in traces:
        rows, m = _kernels(t)
        if len(rows) == 0:
            continue
        key, labels = string_keys(t.name[rows], t.strings)
        n = len(labels)
        dur = np.nan_to_num(t.dur[rows])
        total = np.bincount(key, weights=dur, minlength=n)
        top = np.argsort(-total, kind="stable")[:TOP_KERNELS]
        tc = np.zeros(n, dtype=bool)
        tc[key] = m["tensor_core"]
        order = np.argsort(key, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(key[order]) != 0])  # every key in 0..n-1 occurs
        regs = np.maximum.reduceat(m["registers"][order], starts)
        shm = np.maximum.reduceat(m["shared_memory"][order], starts)
        frames.append(pd.DataFrame({
            "rank": t.rank, "kernel": labels[top], "count": np.bincount(key, minlength=n)[top], "kernel_us": total[top],
            "tensor_core": tc[top],
            "est_sm_efficiency_pct": weighted_pct(m["sm_efficiency_pct"], dur, key, n)[top],
            "est_achieved_occupancy_pct": weighted_pct(m["occupancy_pct"], dur, key, n)[top],
            "registers_per_thread": np.where(regs[top] >= 0, regs[top], np.nan),
            "shared_memory_bytes": np.where(shm[top] >= 0, shm[top], np.nan)}))
    if not frames:
        return pd.DataFrame({c: np.empty(0, object if c == "kernel" else bool if c == "tensor_core" else np.float64)
                             for c in KERNEL_COLUMNS})
    return pd.concat(frames, ignore_index=True)[list(KERNEL_COLUMNS)]
