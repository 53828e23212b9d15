"""Per-step metrics: one row per (rank, profiler step), the samples a regression gate compares.

A step is a CPU-side ``ProfilerStep#N`` span (:func:`perfreport.analyses.steps.step_spans`);
its GPU activity is every kernel, memcpy and memset launched inside it (``RankTrace.iteration``
== N), wherever that work runs in time. Columns (µs unless named otherwise):

* ``step_start_us`` (on the job's common clock, :meth:`TraceSet.aligned_ts`), ``step_time_us``
  (the ProfilerStep span);
* ``gpu_window_us``: first start to last end of the step's GPU activity; ``gpu_busy_us``: the
  union of that activity; ``compute_us``/``comm_us``/``memory_us``: unions of each kernel class
  (:func:`perfreport.model.kernel_class`); ``exposed_comm_us``: comm time not overlapped by
  compute; ``overlap_pct``: overlapped comm as % of comm (NaN without comm); ``idle_us`` =
  window - busy; ``idle_pct``, ``compute_pct``, ``comm_pct``, ``exposed_comm_pct`` are % of
  the window;
* counts: ``kernels``, ``launches`` (launch calls made in the step, ``RankTrace.launches()``),
  ``memcpy_count``, ``memcpy_bytes``, ``memcpy_dtoh_count`` (Memcpy DtoH: copies the host
  usually waits for), ``syncs`` (``cuda_sync`` records plus cudaDeviceSynchronize /
  cudaStreamSynchronize / cudaEventSynchronize calls that have no such record, so a sync
  traced on both sides counts once);
* launches (:func:`perfreport.analyses.launch.rank_launches`, HTA's definitions):
  ``launch_delay_p50_us``/``_p95_us`` over the step's launches with GPU work,
  ``launch_delay_outliers`` (GPU start - call end > ``launch_delay_cutoff_us``),
  ``short_kernels`` (GPU work shorter than its launch call, the call itself at most
  ``runtime_cutoff_us``) and ``blocked_launch_us`` (CPU time of launch calls longer than
  ``runtime_cutoff_us``: a proxy for a full launch queue).

Edge cases. The last profiler step of a rank is dropped unless ``include_last_step`` (HTA does
the same: ``torch.profiler`` often stops inside it, so it is cut short); a rank with a single
step keeps it. A step without GPU work keeps its row: counts 0, GPU times NaN (there is no
window to be idle in). A rank without ProfilerStep events gives one row with ``step`` -1
covering the whole trace (all its events); an empty rank gives that row with NaN times.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import (
    CLASS_INDEX, COMMUNICATION, COMPUTATION, MEMORY, SYNC_CATEGORIES, RankTrace, TraceSet, distinct_codes,
    search_sorted,
)
from ..units import us_to_ms
from .grouping import Grouped
from .intervals import running_max_per_run
from .launch import LAUNCH_DELAY_CUTOFF_US, RUNTIME_CUTOFF_US, rank_launches
from .memory_bw import direction_of
from .steps import step_spans

WHOLE_TRACE_STEP = -1
"""``step`` of the one sample of a rank without ProfilerStep events."""
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize")
"""Runtime calls that block the host until GPU work finishes."""
DTOH = "Memcpy DtoH"

COLUMNS = (
    "rank", "step", "step_start_us", "step_time_us", "gpu_window_us", "gpu_busy_us", "compute_us", "comm_us",
    "memory_us", "exposed_comm_us", "overlap_pct", "idle_us", "idle_pct", "compute_pct", "comm_pct",
    "exposed_comm_pct", "kernels", "launches", "memcpy_count", "memcpy_bytes", "memcpy_dtoh_count", "syncs",
    "launch_delay_p50_us", "launch_delay_p95_us", "launch_delay_outliers", "short_kernels", "blocked_launch_us",
)
COUNT_COLUMNS = ("rank", "step", "kernels", "launches", "memcpy_count", "memcpy_bytes", "memcpy_dtoh_count", "syncs",
                 "launch_delay_outliers", "short_kernels")
STEP_TIME_COLUMNS = ("rank", "step", "step_time_ms")


def step_windows(trace: RankTrace, include_last_step: bool = False) -> pd.DataFrame:
    """(step, start_us, end_us) of the rank's samples, in trace µs, by step number.

    The ProfilerStep spans without the last one (unless ``include_last_step`` or there is only
    one); without any step, one row (step -1) from the first start to the last end of the
    rank's complete events (NaN for a rank without any).
    """
    spans = step_spans(trace)
    if len(spans) == 0:
        first, last = trace.span_us()
        return pd.DataFrame({"step": np.array([WHOLE_TRACE_STEP], dtype=np.int64),
                             "start_us": [first], "end_us": [last]})
    if not include_last_step and len(spans) > 1:
        spans = spans.iloc[:-1]
    return spans.reset_index(drop=True)


def sample_of(trace: RankTrace, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Position in ``steps`` of the sample each event of ``rows`` belongs to, -1 if none.

    With the whole-trace sample (``steps`` == [-1]) every event belongs to it; otherwise an
    event belongs to the step of ``RankTrace.iteration`` (GPU work: its launch's step).
    """
    if len(steps) == 1 and steps[0] == WHOLE_TRACE_STEP:
        return np.zeros(len(rows), dtype=np.int64)
    it = trace.iteration[rows]
    if len(steps) == 0:
        return np.full(len(rows), -1, dtype=np.int64)
    pos = np.clip(search_sorted(steps, it), 0, len(steps) - 1)
    return np.where((steps[pos] == it) & (it != WHOLE_TRACE_STEP), pos, -1)


def covered_by_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_groups: int) -> np.ndarray:
    """Time covered by the union of each group's intervals (µs), for groups 0..n_groups-1.

    The intervals come sorted by (group, start) (a selection of sorted intervals stays sorted,
    so several unions over subsets share one sort). A running maximum of the ends within each
    group (``intervals.union`` done for every group at once); touching intervals merge. Groups
    without intervals cover 0.
    """
    if len(starts) == 0:
        return np.zeros(n_groups)
    other_group = group[1:] != group[:-1]
    reach = running_max_per_run(ends, np.flatnonzero(np.r_[True, other_group]))
    new = np.r_[True, other_group | (starts[1:] > reach[:-1])]  # a new merged interval starts
    heads = np.flatnonzero(new)
    tails = np.append(heads[1:], len(starts)) - 1
    return np.bincount(group[heads], weights=reach[tails] - starts[heads], minlength=n_groups)


def _gpu_times(trace: RankTrace, steps: np.ndarray) -> dict[str, np.ndarray]:
    """Window, busy and class unions (µs) of each sample's GPU activity; NaN without any."""
    n = len(steps)
    rows = trace.gpu_work_rows()
    slot = sample_of(trace, rows, steps)
    rows, slot = rows[slot >= 0], slot[slot >= 0]
    starts = trace.ts[rows]  # each column read once, then put in order
    order = np.lexsort((starts, slot))  # one sort for the five unions below
    rows, slot, starts = rows[order], slot[order], starts[order]
    ends = starts + np.maximum(trace.dur[rows], 0.0)
    classes = trace.gpu_class()[rows]  # indices into KERNEL_CLASS_NAMES: int compares, not str
    has = np.bincount(slot, minlength=n) > 0
    heads = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]]) if len(slot) else np.empty(0, np.int64)
    first = np.full(n, np.inf)
    first[slot[heads]] = starts[heads]  # sorted by start within a sample
    last = np.full(n, -np.inf)
    if len(heads):
        last[slot[heads]] = np.maximum.reduceat(ends, heads)
    out = {"gpu_window_us": last - first, "gpu_busy_us": covered_by_group(slot, starts, ends, n)}
    compute, comm = CLASS_INDEX[COMPUTATION], CLASS_INDEX[COMMUNICATION]
    for column, cls in (("compute_us", compute), ("comm_us", comm), ("memory_us", CLASS_INDEX[MEMORY])):
        sel = classes == cls
        out[column] = covered_by_group(slot[sel], starts[sel], ends[sel], n)
    # comm ∩ compute = comm + compute - (comm ∪ compute)
    both = (classes == compute) | (classes == comm)
    either = covered_by_group(slot[both], starts[both], ends[both], n)
    overlap = np.maximum(out["comm_us"] + out["compute_us"] - either, 0.0)
    out["exposed_comm_us"] = out["comm_us"] - overlap
    with np.errstate(divide="ignore", invalid="ignore"):
        out["overlap_pct"] = np.where(out["comm_us"] > 0, 100.0 * overlap / out["comm_us"], np.nan)
    for column in ("gpu_window_us", "gpu_busy_us", "compute_us", "comm_us", "memory_us", "exposed_comm_us"):
        out[column] = np.where(has, out[column], np.nan)
    out["idle_us"] = out["gpu_window_us"] - out["gpu_busy_us"]
    window = out["gpu_window_us"]
    with np.errstate(divide="ignore", invalid="ignore"):
        for column, part in (("idle_pct", "idle_us"), ("compute_pct", "compute_us"), ("comm_pct", "comm_us"),
                             ("exposed_comm_pct", "exposed_comm_us")):
            out[column] = np.where(window > 0, 100.0 * out[part] / window, np.nan)
    return out


def _counts(trace: RankTrace, steps: np.ndarray) -> dict[str, np.ndarray]:
    """Event counts per sample (see the module docstring)."""
    n = len(steps)

    def count(rows: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        slot = sample_of(trace, rows, steps)
        ok = slot >= 0
        return np.bincount(slot[ok], weights=None if weights is None else weights[ok], minlength=n)

    memcpy = np.flatnonzero(trace.memcpys())
    names = trace.name[memcpy]
    codes = distinct_codes(names, len(trace.strings))[0]
    dtoh_codes = codes[[direction_of(trace.strings[c], False) == DTOH for c in codes]] if len(codes) else codes
    nbytes = np.maximum(trace.arg("bytes", -1, memcpy), 0).astype(np.float64)
    # the few sync rows first, then their tests (no temporaries over every event)
    sync_records = np.flatnonzero(trace.is_cat(SYNC_CATEGORIES))
    sync_records = sync_records[trace.complete[sync_records]]
    sync_calls = np.flatnonzero(trace.is_name(SYNC_CALLS))
    sync_calls = sync_calls[trace.complete[sync_calls] & ~trace.gpu_side()[sync_calls]]
    # a call whose GPU-side record is in the trace is counted through the record
    linked = trace.linked[sync_records]
    sync_calls = sync_calls[~np.isin(sync_calls, linked[linked >= 0])]
    return {
        "kernels": count(np.flatnonzero(trace.kernels())),
        "launches": count(np.flatnonzero(trace.launches())),
        "memcpy_count": count(memcpy),
        "memcpy_bytes": count(memcpy, nbytes),
        "memcpy_dtoh_count": count(memcpy[np.isin(names, dtoh_codes)]),
        "syncs": count(sync_records) + count(sync_calls),
    }


def _launch_stats(trace: RankTrace, steps: np.ndarray, runtime_cutoff_us: float,
                  launch_delay_cutoff_us: float) -> dict[str, np.ndarray]:
    """Launch-delay percentiles and flag counts per sample, from :func:`rank_launches`."""
    n = len(steps)
    table = rank_launches(trace, runtime_cutoff_us, launch_delay_cutoff_us)
    slot = sample_of(trace, table["row"].to_numpy(dtype=np.int64), steps)
    ok = slot >= 0
    column = {c: table[c].to_numpy()[ok] for c in ("launch_delay_us", "launch_delay_outlier", "short_kernel",
                                                   "runtime_outlier", "cpu_dur_us")}
    g = Grouped({"slot": slot[ok], **column}, ["slot"])
    at = slot[ok][g.first]  # the samples that have launches; the others get 0 / NaN

    def spread(values: np.ndarray, fill) -> np.ndarray:
        out = np.full(n, fill, dtype=np.result_type(values.dtype, np.asarray(fill).dtype))
        out[at] = values
        return out

    blocked = np.where(column["runtime_outlier"], column["cpu_dur_us"], 0.0)
    return {
        "launch_delay_p50_us": spread(g.median("launch_delay_us"), np.nan),
        "launch_delay_p95_us": spread(g.quantile("launch_delay_us", 0.95), np.nan),
        "launch_delay_outliers": spread(g.sum("launch_delay_outlier"), 0),
        "short_kernels": spread(g.sum("short_kernel"), 0),
        "blocked_launch_us": spread(g.sum(blocked), 0.0),
    }


def rank_step_metrics(trace: RankTrace, offset_us: float = 0.0, *,
                      launch_delay_cutoff_us: float = LAUNCH_DELAY_CUTOFF_US,
                      runtime_cutoff_us: float = RUNTIME_CUTOFF_US, include_last_step: bool = False) -> pd.DataFrame:
    """Rows of :func:`step_metrics` for one rank; ``offset_us`` moves step starts onto the
    job's common clock (the shift :meth:`TraceSet.aligned_ts` applies to this rank).

    Memoised on the rank's own clock per cutoffs (a per-rank summary a worker sends back); the
    shift is added to the copy returned."""
    key = ("rank_step_metrics", float(launch_delay_cutoff_us), float(runtime_cutoff_us), bool(include_last_step))
    frame = trace.memo(key, lambda: _rank_step_metrics(trace, launch_delay_cutoff_us, runtime_cutoff_us,
                                                         include_last_step))
    return frame.assign(step_start_us=frame["step_start_us"].to_numpy() + offset_us)


def _rank_step_metrics(trace: RankTrace, launch_delay_cutoff_us: float, runtime_cutoff_us: float,
                       include_last_step: bool) -> pd.DataFrame:
    offset_us = 0.0
    windows = step_windows(trace, include_last_step)
    steps = windows["step"].to_numpy(dtype=np.int64)
    start = windows["start_us"].to_numpy(dtype=np.float64)
    data = {
        "rank": np.full(len(steps), trace.rank, dtype=np.int64),
        "step": steps,
        "step_start_us": start + offset_us,
        "step_time_us": windows["end_us"].to_numpy(dtype=np.float64) - start,
        **_gpu_times(trace, steps),
        **_counts(trace, steps),
        **_launch_stats(trace, steps, runtime_cutoff_us, launch_delay_cutoff_us),
    }
    for c in COUNT_COLUMNS:  # on the arrays: cheaper than DataFrame.astype on the frame
        data[c] = np.asarray(data[c]).astype(np.int64)
    return pd.DataFrame(data, columns=list(COLUMNS))


def step_metrics(traces: TraceSet, *, launch_delay_cutoff_us: float = LAUNCH_DELAY_CUTOFF_US,
                 runtime_cutoff_us: float = RUNTIME_CUTOFF_US, include_last_step: bool = False) -> pd.DataFrame:
    """One row per (rank, step): step time, GPU time breakdown, counts and launch statistics.

    See the module docstring for every column and the edge cases (last step dropped by
    default, steps without GPU work, traces without steps). Sorted by rank, then step.
    """
    frames = [rank_step_metrics(t, float(t.meta.ts_origin_us - traces.origin_us),
                                launch_delay_cutoff_us=launch_delay_cutoff_us, runtime_cutoff_us=runtime_cutoff_us,
                                include_last_step=include_last_step) for t in traces]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in COUNT_COLUMNS else np.float64) for c in COLUMNS})
    return pd.concat(frames, ignore_index=True)


def step_time_series(traces: TraceSet, *, include_last_step: bool = False) -> pd.DataFrame:
    """(rank, step, step_time_ms): the ProfilerStep span of each sample of :func:`step_metrics`
    (same steps: the last dropped by default, step -1 for a rank without steps), in ms."""
    rows = []
    for t in traces:  # a loop over ranks
        w = step_windows(t, include_last_step)
        rows.append(pd.DataFrame({"rank": np.full(len(w), t.rank, dtype=np.int64), "step": w["step"].to_numpy(),
                                  "step_time_ms": us_to_ms((w["end_us"] - w["start_us"]).to_numpy(np.float64))}))
    if not rows:
        return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "step": pd.Series(dtype=np.int64),
                             "step_time_ms": pd.Series(dtype=np.float64)})
    return pd.concat(rows, ignore_index=True)[list(STEP_TIME_COLUMNS)]


__all__ = ["step_metrics", "step_time_series", "step_windows", "rank_step_metrics", "sample_of", "covered_by_group",
           "COLUMNS", "WHOLE_TRACE_STEP"]
