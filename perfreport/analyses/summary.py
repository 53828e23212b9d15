"""Per-rank overview: what the trace holds and how busy the GPU was.

GPU busy time is the union of kernel, memcpy and memset intervals (concurrent streams count
once); its percentage is of the GPU span, first GPU start to last GPU end. A rank without GPU
activity (a CPU-only or metadata-only trace, CUPTI counter mode) gets NaN times and a note.
"""

from __future__ import annotations

import pandas as pd

from ..model import KERNEL_CATEGORIES, MEMCPY_CATEGORIES, MEMSET_CATEGORIES, RankTrace, TraceSet
from ..units import pct
from .intervals import covered

NO_GPU_NOTE = "no GPU activity: the trace has no kernel, memcpy or memset events"

COLUMNS = (
    "rank", "events", "complete_events", "kernels", "memcpy", "memset", "gpu_busy_us",
    "gpu_span_us", "gpu_busy_pct", "steps", "first_step", "last_step", "span_us", "gpu_name", "note",
)


def rank_summary(trace: RankTrace) -> dict:
    """One row of :func:`summary` (see the module docstring for the definitions)."""
    gpu = trace.gpu_work_rows()
    starts = trace.ts[gpu]
    ends = starts + trace.dur[gpu]
    has_gpu = bool(len(gpu))
    busy = covered(starts, ends) if has_gpu else float("nan")
    gpu_span = float(ends.max() - starts.min()) if has_gpu else float("nan")
    first, last = trace.span_us()
    steps = trace.step_numbers()
    return {
        "rank": trace.rank,
        "events": trace.n_events,
        "complete_events": int(trace.complete.sum()),
        # counted by category alone, as any reader of the JSON would count them
        "kernels": int(trace.is_cat(KERNEL_CATEGORIES).sum()),
        "memcpy": int(trace.is_cat(MEMCPY_CATEGORIES).sum()),
        "memset": int(trace.is_cat(MEMSET_CATEGORIES).sum()),
        "gpu_busy_us": busy,
        "gpu_span_us": gpu_span,
        "gpu_busy_pct": pct(busy, gpu_span) if has_gpu else float("nan"),
        "steps": len(steps),
        "first_step": int(steps[0]) if len(steps) else None,
        "last_step": int(steps[-1]) if len(steps) else None,
        "span_us": last - first,
        "gpu_name": trace.meta.gpu_name(),
        "note": "; ".join(filter(None, (None if has_gpu else NO_GPU_NOTE, trace.meta.dropped_note,
                                        trace.meta.step_restarts))) or None,
    }


def summary(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: event counts, GPU busy time (µs) and %, steps, span (µs), GPU name."""
    return pd.DataFrame([rank_summary(t) for t in traces], columns=list(COLUMNS))
