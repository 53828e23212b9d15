"""Temporal breakdown: how the GPU's time splits into idle, compute and non-compute.

Over the GPU span (first GPU-work start to last GPU-work end, µs), with GPU work = kernels,
memcpy and memset (sync records are waits, not work):

* busy = union of all GPU work (concurrent streams count once); idle = span - busy;
* compute = union of COMPUTATION kernels;
* non-compute = busy - compute: communication and memory time *not hidden under compute*.

The three percentages are of the span and add up to 100. Per step, the span is that of the
step's own GPU work (work belongs to the step of the launch that enqueued it; step -1 is work
outside any ProfilerStep). A rank without GPU work gets NaN times and percentages.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..model import COMPUTATION, TraceSet
from ..units import pct
from .intervals import covered
from .kernels import CLASSES, class_positions, gpu_work_rows

COLUMNS = ("rank", "gpu_span_us", "busy_us", "idle_us", "compute_us", "non_compute_us", "idle_pct",
           "compute_pct", "non_compute_pct")


def _breakdown(starts: np.ndarray, ends: np.ndarray, classes: np.ndarray) -> dict:
    if len(starts) == 0:
        nan = math.nan
        return {"gpu_span_us": nan, "busy_us": nan, "idle_us": nan, "compute_us": nan, "non_compute_us": nan,
                "idle_pct": nan, "compute_pct": nan, "non_compute_pct": nan}
    span = float(ends.max() - starts.min())
    busy = covered(starts, ends)
    comp = class_positions(classes) == CLASSES.index(COMPUTATION)
    compute = covered(starts[comp], ends[comp])
    return {"gpu_span_us": span, "busy_us": busy, "idle_us": span - busy, "compute_us": compute,
            "non_compute_us": busy - compute, "idle_pct": pct(span - busy, span), "compute_pct": pct(compute, span),
            "non_compute_pct": pct(busy - compute, span)}


def temporal_breakdown(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: GPU span, busy, idle, compute, non-compute (µs) and % of span."""
    return pd.DataFrame(gpu_work_rows(traces, _breakdown, per_step=False), columns=list(COLUMNS))


def temporal_breakdown_per_step(traces: TraceSet) -> pd.DataFrame:
    """One row per (rank, step) with GPU work: :func:`temporal_breakdown` of that step's work."""
    return pd.DataFrame(gpu_work_rows(traces, _breakdown, per_step=True), columns=["rank", "step", *COLUMNS[1:]])
