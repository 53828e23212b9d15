"""Idle time on each GPU stream, split by its likely cause.

On each stream, GPU work (kernels, memcpy, memset) is taken in start order. The gap before a
piece of work is its start minus the latest end of all earlier work on that stream (so work
that overlaps, or touches, leaves no gap). Each positive gap is one idle interval:

* ``host_wait`` - the work's launch call (its linked CPU runtime event) started only after
  the stream had drained: the GPU waited for the host to enqueue work;
* ``kernel_wait`` - otherwise, if the gap is shorter than ``consecutive_kernel_delay_us``
  (default 30 µs): the usual launch overhead between back-to-back kernels;
* ``other`` - anything else (e.g. waiting on another stream's event).

Work without a known launch can only be kernel_wait or other. The time before the first
piece of work on a stream is not idle (the stream's span starts there). Per step, a gap
belongs to the step of the work that ends it (the launch's ProfilerStep; -1 outside steps).
Times are µs; ``idle_share_pct`` is a category's share of the stream's idle time (NaN when
the stream has none).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet

DEFAULT_CONSECUTIVE_KERNEL_DELAY_US = 30.0
"""HTA's default: gaps below 30 µs between kernels are taken as launch overhead."""
CATEGORIES = ("host_wait", "kernel_wait", "other")

BREAKDOWN_COLUMNS = ("rank", "stream", "idle_category", "idle_us", "gaps", "idle_share_pct")
STATS_COLUMNS = ("rank", "stream", "idle_category", "count", "mean_us", "std_us", "min_us", "p25_us", "p50_us",
                 "p75_us", "max_us")


def stream_gaps(trace: RankTrace, consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US,
                ) -> pd.DataFrame:
    """One row per piece of GPU work: stream, step, gap_us before it (NaN for the first on its
    stream) and idle_category (None unless the gap is positive)."""
    rows = np.flatnonzero(trace.gpu_activity() & np.isfinite(trace.dur) & np.isfinite(trace.ts))
    stream, ts = trace.stream[rows], trace.ts[rows]
    end = ts + trace.dur[rows]
    order = np.lexsort((end, ts, stream))
    rows, stream, ts, end = rows[order], stream[order], ts[order], end[order]
    reach = pd.Series(end).groupby(stream).cummax().to_numpy()
    first = np.ones(len(rows), dtype=bool)
    first[1:] = stream[1:] != stream[:-1]
    prev_reach = np.concatenate([[np.nan], reach[:-1]])
    prev_reach[first] = np.nan
    gap = ts - prev_reach
    linked = trace.linked[rows]
    launch_ts = np.where(linked >= 0, trace.ts[np.clip(linked, 0, None)], np.nan) if len(rows) else np.empty(0)
    with np.errstate(invalid="ignore"):
        idle = gap > 0
        host = launch_ts > prev_reach
        category = np.where(host, CATEGORIES[0], np.where(gap < consecutive_kernel_delay_us, CATEGORIES[1],
                                                          CATEGORIES[2])).astype(object)
    category[~idle] = None
    return pd.DataFrame({"rank": trace.rank, "stream": stream, "step": trace.iteration[rows], "gap_us": gap,
                         "idle_category": category})


def _all_categories(gaps: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Every (keys..., category) combination for the key values present in ``gaps``."""
    present = gaps[keys].drop_duplicates()
    cats = pd.DataFrame({"idle_category": list(CATEGORIES)})
    return present.merge(cats, how="cross")


def _breakdown(gaps: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    grid = _all_categories(gaps, keys)
    idle = gaps[gaps["idle_category"].notna()]
    agg = idle.groupby(keys + ["idle_category"])["gap_us"].agg(idle_us="sum", gaps="count").reset_index()
    out = grid.merge(agg, on=keys + ["idle_category"], how="left")
    out["idle_us"] = out["idle_us"].fillna(0.0)
    out["gaps"] = out["gaps"].fillna(0).astype(np.int64)
    total = out.groupby(keys)["idle_us"].transform("sum").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        out["idle_share_pct"] = np.where(total > 0, 100.0 * out["idle_us"].to_numpy() / total, np.nan)
    return out


def idle_breakdown(traces: TraceSet,
                   consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US) -> pd.DataFrame:
    """Per rank, stream and idle category (all three always listed): idle µs, gaps, share %."""
    parts = [stream_gaps(t, consecutive_kernel_delay_us) for t in traces]
    gaps = pd.concat(parts, ignore_index=True) if parts else stream_gaps_empty()
    if len(gaps) == 0:
        return pd.DataFrame(columns=list(BREAKDOWN_COLUMNS))
    return _breakdown(gaps, ["rank", "stream"])[list(BREAKDOWN_COLUMNS)]


def idle_breakdown_per_step(traces: TraceSet,
                            consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US,
                            ) -> pd.DataFrame:
    """:func:`idle_breakdown` per (rank, step, stream) that ran GPU work in the step."""
    parts = [stream_gaps(t, consecutive_kernel_delay_us) for t in traces]
    gaps = pd.concat(parts, ignore_index=True) if parts else stream_gaps_empty()
    columns = ["rank", "step", *BREAKDOWN_COLUMNS[1:]]
    if len(gaps) == 0:
        return pd.DataFrame(columns=columns)
    return _breakdown(gaps, ["rank", "step", "stream"])[columns]


def idle_interval_stats(traces: TraceSet,
                        consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US) -> pd.DataFrame:
    """Per rank, stream and idle category: count, mean, std, min, quartiles, max of the gaps (µs)."""
    parts = [stream_gaps(t, consecutive_kernel_delay_us) for t in traces]
    gaps = pd.concat(parts, ignore_index=True) if parts else stream_gaps_empty()
    if len(gaps) == 0:
        return pd.DataFrame(columns=list(STATS_COLUMNS))
    keys = ["rank", "stream", "idle_category"]
    grid = _all_categories(gaps, ["rank", "stream"])
    idle = gaps[gaps["idle_category"].notna()]
    grouped = idle.groupby(keys)["gap_us"]
    stats = grouped.agg(count="count", mean_us="mean", std_us="std", min_us="min", max_us="max")
    for q, name in ((0.25, "p25_us"), (0.5, "p50_us"), (0.75, "p75_us")):
        stats[name] = grouped.quantile(q)
    out = grid.merge(stats.reset_index(), on=keys, how="left")
    out["count"] = out["count"].fillna(0).astype(np.int64)
    return out[list(STATS_COLUMNS)]


def stream_gaps_empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "stream": pd.Series(dtype=np.int64),
                         "step": pd.Series(dtype=np.int64), "gap_us": pd.Series(dtype=np.float64),
                         "idle_category": pd.Series(dtype=object)})
