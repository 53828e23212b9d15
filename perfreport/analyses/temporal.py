"""Temporal breakdown: how the GPU's time splits into idle, compute and non-compute.

Over the GPU span (first GPU-work start to last GPU-work end, µs), with GPU work = kernels,
memcpy and memset (sync records are waits, not work):

* busy = union of all GPU work (concurrent streams count once); idle = span - busy;
* compute = union of COMPUTATION kernels;
* non-compute = busy - compute: communication and memory time *not hidden under compute*.

The three percentages are of the span and add up to 100. Communication that runs on the host
(gloo's ``gloo:*`` spans, :meth:`perfreport.model.RankTrace.host_collectives`) is part of the
idle time (the GPU does nothing meanwhile) and is split out of it: ``host_comm_us`` is the idle
time during which a host collective runs, ``other_idle_pct`` the rest of the idle share. Per
step, the span is that of the step's own GPU work (work belongs to the step of the launch that
enqueued it; step -1 is work outside any ProfilerStep) and its host collectives are those that
start inside the step. A rank without GPU work gets NaN times and percentages.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..model import COMPUTATION, TraceSet
from ..units import pct, pcts
from .intervals import merged_intersection_length, union
from .kernels import CLASSES, WorkUnions, gpu_work_step_unions, gpu_work_unions, host_collective_spans
from .segments import intersection_lengths, positions_in, segment_union

COLUMNS = ("rank", "gpu_span_us", "busy_us", "idle_us", "compute_us", "non_compute_us", "idle_pct",
           "compute_pct", "non_compute_pct", "host_comm_us", "host_comm_pct", "other_idle_pct")


def _breakdown(unions: WorkUnions) -> dict:
    busy_s, busy_e = unions.busy
    if len(busy_s) == 0:
        nan = math.nan
        return {"gpu_span_us": nan, "busy_us": nan, "idle_us": nan, "compute_us": nan, "non_compute_us": nan,
                "idle_pct": nan, "compute_pct": nan, "non_compute_pct": nan, "host_comm_us": nan,
                "host_comm_pct": nan, "other_idle_pct": nan}
    span = float(busy_e[-1] - busy_s[0])  # the last merged end is the latest end, the first start the earliest
    busy = _length(unions.busy)
    compute = _length(unions.by_class[CLASSES.index(COMPUTATION)])
    return {"gpu_span_us": span, "busy_us": busy, "idle_us": span - busy, "compute_us": compute,
            "non_compute_us": busy - compute, "idle_pct": pct(span - busy, span), "compute_pct": pct(compute, span),
            "non_compute_pct": pct(busy - compute, span), "host_comm_us": 0.0, "host_comm_pct": 0.0,
            "other_idle_pct": pct(span - busy, span)}


def _length(merged: tuple[np.ndarray, np.ndarray]) -> float:
    """Time covered by merged intervals (:func:`~perfreport.analyses.intervals.covered` of the
    intervals they were merged from)."""
    s, e = merged
    return float((e - s).sum())


def _host_comm(row: dict, unions: WorkUnions, h_s: np.ndarray, h_e: np.ndarray) -> dict:
    """``row`` with the idle time a host collective covers inside its GPU span (see module doc)."""
    starts, ends = unions.busy  # merged: the same coverage as the work itself
    if len(starts) == 0:
        return row
    lo, hi = float(starts[0]), float(ends[-1])
    hs, he = np.clip(h_s, lo, hi), np.clip(h_e, lo, hi)
    keep = he > hs
    host_merged = union(hs[keep], he[keep])
    host = _length(host_merged) - merged_intersection_length(host_merged, unions.busy)
    span = row["gpu_span_us"]
    return {**row, "host_comm_us": host, "host_comm_pct": pct(host, span),
            "other_idle_pct": pct(row["idle_us"] - host, span)}


def _rows(traces: TraceSet) -> list[dict]:
    rows = []
    for trace in traces:  # a loop over ranks
        h_s, h_e, _ = host_collective_spans(trace)
        unions = gpu_work_unions(trace)
        rows.append({"rank": trace.rank, **_host_comm(_breakdown(unions), unions, h_s, h_e)})
    return rows


def _step_frame(trace) -> pd.DataFrame:
    """:func:`_breakdown` and :func:`_host_comm` of every step of one rank at once
    (:mod:`~perfreport.analyses.segments`): one row per step with GPU work."""
    u = gpu_work_step_unions(trace)
    n = len(u.steps)
    lo, hi = u.busy.first_start(), u.busy.last_end()
    span = hi - lo  # the last merged end is the latest end, the first start the earliest
    busy = u.busy.lengths()
    compute = u.by_class[CLASSES.index(COMPUTATION)].lengths()
    h_s, h_e, h_step = host_collective_spans(trace)
    k, mine = positions_in(u.steps, h_step)  # only the collectives of steps with GPU work have a row
    k = k[mine]
    hs, he = np.clip(h_s[mine], lo[k], hi[k]), np.clip(h_e[mine], lo[k], hi[k])
    keep = he > hs
    host_merged = segment_union(k[keep], n, hs[keep], he[keep])
    host = host_merged.lengths() - intersection_lengths(host_merged, u.busy)
    idle = span - busy
    return pd.DataFrame({
        "rank": np.full(n, trace.rank, dtype=np.int64), "step": u.steps.astype(np.int64), "gpu_span_us": span,
        "busy_us": busy, "idle_us": idle, "compute_us": compute, "non_compute_us": busy - compute,
        "idle_pct": pcts(idle, span), "compute_pct": pcts(compute, span), "non_compute_pct": pcts(busy - compute, span),
        "host_comm_us": host, "host_comm_pct": pcts(host, span), "other_idle_pct": pcts(idle - host, span)})


def temporal_breakdown(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: GPU span, busy, idle, compute, non-compute, idle under host-side
    communication (µs) and % of span."""
    return pd.DataFrame(_rows(traces), columns=list(COLUMNS))


def temporal_breakdown_per_step(traces: TraceSet) -> pd.DataFrame:
    """One row per (rank, step) with GPU work: :func:`temporal_breakdown` of that step's work."""
    columns = ["rank", "step", *COLUMNS[1:]]
    frames = [f for f in (_step_frame(trace) for trace in traces) if len(f)]
    if not frames:
        return pd.DataFrame([], columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]
