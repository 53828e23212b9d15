"""Profiler steps: when each ``ProfilerStep#N`` ran on each rank and how busy its GPU work kept
the GPU.

A step is the CPU-side ``ProfilerStep#N`` span that ``torch.profiler`` records per ``step()``
(GPU-side copies of the annotation are ignored; a number recorded twice on one rank, on two
threads at once, spans from the first start to the last end; numbers that start again later,
traces put back to back, were numbered on at load: :mod:`perfreport.load.restarts`). Its GPU work is every kernel, memcpy and memset whose
launch falls inside the step (``RankTrace.iteration``), wherever it runs in time: GPU work
often finishes after the step's CPU span ends. GPU busy time is the union of those
intervals, so concurrent streams count once.

Edge cases: a rank without steps contributes no rows; a rank without any GPU activity has NaN
GPU times (not 0: there is no GPU to be idle); an empty TraceSet gives empty frames.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet
from ..units import pct
from .grouping import Grouped
from .intervals import window_overlaps
from .segments import positions_in, segment_union

STEP_COLUMNS = ("rank", "step", "start_us", "end_us", "wall_us", "gpu_events", "gpu_busy_us",
                "gpu_start_us", "gpu_end_us", "gpu_busy_in_step_us")
STEP_TIME_COLUMNS = ("rank", "steps", "first_step", "last_step", "wall_us_mean", "wall_us_median",
                     "wall_us_min", "wall_us_max", "wall_us_std", "gpu_busy_us_mean", "gpu_busy_pct")


def step_spans(trace: RankTrace) -> pd.DataFrame:
    """(step, start_us, end_us) of the rank's CPU-side ProfilerStep spans, by step number.

    Memoised on the trace (the step table, stragglers and per-step metrics share it); each
    call gets its own (shallow, copy-on-write) frame.
    """
    return trace.memo("step_spans", lambda: _step_spans(trace)).copy(deep=False)


def _step_spans(trace: RankTrace) -> pd.DataFrame:
    rows = np.flatnonzero(trace.steps())  # the few step spans, then their checks (no pass over every event)
    rows = rows[~trace.gpu_side()[rows] & np.isfinite(trace.dur[rows])]
    if len(rows) == 0:
        return pd.DataFrame({"step": pd.Series(dtype=np.int64), "start_us": pd.Series(dtype=np.float64),
                             "end_us": pd.Series(dtype=np.float64)})
    numbers = trace.step_name_numbers()[trace.name[rows]]
    f = pd.DataFrame({"step": numbers, "start_us": trace.ts[rows], "end_us": trace.ts[rows] + trace.dur[rows]})
    g = Grouped(f, ["step"])
    return g.frame({"start_us": g.min("start_us"), "end_us": g.max("end_us")})


def rank_steps(trace: RankTrace) -> pd.DataFrame:
    """Rows of :func:`profiler_steps` for one rank, memoised on the trace (profiler_steps is
    the base of step_times, the stragglers and the report's step series)."""
    return trace.memo("profiler_steps", lambda: _rank_steps(trace)).copy(deep=False)


def _rank_steps(trace: RankTrace) -> pd.DataFrame:
    spans = step_spans(trace)
    steps = spans["step"].to_numpy()
    w0, w1 = spans["start_us"].to_numpy(), spans["end_us"].to_numpy()
    gpu = trace.gpu_work_rows()
    starts = trace.ts[gpu]
    ends = starts + trace.dur[gpu]
    its = trace.iteration[gpu]
    k, mine = positions_in(steps, its)  # the step that launched each piece of work, if a listed one
    launched = segment_union(k[mine], len(steps), starts[mine], ends[mine])
    has_gpu = bool(len(gpu))
    return pd.DataFrame({
        "rank": np.full(len(spans), trace.rank, dtype=np.int64),
        "step": steps,
        "start_us": w0,
        "end_us": w1,
        "wall_us": (spans["end_us"] - spans["start_us"]).to_numpy(),
        "gpu_events": np.bincount(k[mine], minlength=len(steps)).astype(np.int64),
        "gpu_busy_us": launched.lengths() if has_gpu else np.full(len(spans), np.nan),
        "gpu_start_us": launched.first_start(),
        "gpu_end_us": launched.last_end(),
        "gpu_busy_in_step_us": _busy_in_windows(starts, ends, w0, w1) if has_gpu else np.full(len(spans), np.nan),
    }, columns=list(STEP_COLUMNS))


def _busy_in_windows(starts: np.ndarray, ends: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Per window [w0, w1): the time (µs) any of the intervals covers inside it, whichever step
    launched them — how busy the GPU was during the step, so within 0 and the window's length.
    Each interval is cut to every window it meets (:func:`.intervals.window_overlaps`), and the
    pieces of all windows are merged at once, a group per window."""
    by_start = np.argsort(w0, kind="stable")
    _, window, lo, hi = window_overlaps(w0[by_start], w1[by_start], starts, ends)
    out = np.empty(len(w0))
    out[by_start] = segment_union(window, len(w0), lo, hi).lengths()
    return out


def profiler_steps(traces: TraceSet) -> pd.DataFrame:
    """One row per (rank, step): start/end (trace µs), wall time (µs), the number of GPU events
    launched in the step, their busy time (µs, union), first start / last end (trace µs) and the
    GPU's busy time inside the step's window, whichever step launched the work (µs)."""
    frames = [rank_steps(t) for t in traces]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in ("rank", "step", "gpu_events") else np.float64)
                             for c in STEP_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def step_times(traces: TraceSet) -> pd.DataFrame:
    """One row per rank with steps: step count, wall time statistics (µs, std with ddof=1,
    NaN for one step), mean GPU busy time per step (µs) and the share of the steps' wall time the
    GPU was busy (%, within 0–100: the GPU work inside the step windows, whoever launched it)."""
    steps = profiler_steps(traces)
    rows = []
    for rank, g in steps.groupby("rank", sort=True):  # a loop over ranks
        wall = g["wall_us"].to_numpy()
        busy = g["gpu_busy_us"].to_numpy()
        inside = g["gpu_busy_in_step_us"].to_numpy()
        rows.append({
            "rank": int(rank), "steps": len(g), "first_step": int(g["step"].min()), "last_step": int(g["step"].max()),
            "wall_us_mean": float(wall.mean()), "wall_us_median": float(np.median(wall)),
            "wall_us_min": float(wall.min()), "wall_us_max": float(wall.max()),
            "wall_us_std": float(wall.std(ddof=1)) if len(wall) > 1 else np.nan,
            "gpu_busy_us_mean": float(busy.mean()),
            "gpu_busy_pct": pct(float(inside.sum()), float(wall.sum())),
        })
    return pd.DataFrame(rows, columns=list(STEP_TIME_COLUMNS))
